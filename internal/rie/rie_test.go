package rie

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testenv"
)

func TestAnswerError(t *testing.T) {
	for _, ok := range []string{
		`{"watermark":1}`, `{"batchItemFailures":[]}`, `null`, `[]`, `"s"`, ``,
		`{"errorMessage":"x"}`,                   // one key alone is a handler's output
		`{"errorMessage":null,"errorType":null}`, // so are nulls
		`{"errorMessage":1,"errorType":"T"}`,
	} {
		if e := answerError(http.StatusOK, []byte(ok)); e != nil {
			t.Errorf("%s taken for an error: %v", ok, e)
		}
	}
	e := answerError(http.StatusOK, []byte(`{"errorMessage":"boom","errorType":"errorString"}`))
	if e == nil || e.Type != "errorString" || e.Message != "boom" || !IsFunctionError(e) {
		t.Errorf("error document: got %#v", e)
	}
	// aws-lambda-go's panic document: the trace holds frame objects.
	e = answerError(http.StatusOK, []byte(`{"errorMessage":"p","errorType":"runtime.Error","stackTrace":[{"path":"x.go","line":1,"label":"f"}]}`))
	if e == nil || e.Message != "p" || len(e.Trace) == 0 {
		t.Errorf("panic document: got %#v", e)
	}
	e = answerError(http.StatusOK, []byte("Task timed out after 1.00 seconds"))
	if e == nil || e.Type != TimeoutType || !IsFunctionError(e) {
		t.Errorf("timeout: got %#v", e)
	}
	// A refused invocation is an error, but not the function's.
	e = answerError(http.StatusBadRequest, []byte(`{"watermark":1}`))
	if e == nil || e.Status != http.StatusBadRequest || IsFunctionError(e) || !strings.Contains(e.Error(), "HTTP 400") {
		t.Errorf("HTTP 400: got %#v", e)
	}
}

func TestEnvironment(t *testing.T) {
	t.Setenv("OUTBOXKEEPER_LEAK", "x")
	env := Environment("fn", map[string]string{"A": "1", "AWS_LAMBDA_LOG_FORMAT": "", "AWS_LAMBDA_FUNCTION_TIMEOUT": "5"})
	for _, want := range []string{"A=1", "AWS_LAMBDA_FUNCTION_NAME=fn", "AWS_LAMBDA_FUNCTION_TIMEOUT=5"} {
		if !slices.Contains(env, want) {
			t.Errorf("%s missing from %v", want, env)
		}
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "OUTBOXKEEPER_LEAK=") || strings.HasPrefix(kv, "AWS_LAMBDA_LOG_FORMAT=") || strings.HasPrefix(kv, "HOME=") {
			t.Errorf("%s should not be in the environment", kv)
		}
	}
}

// startEcho builds the harness's echo function and starts it under the
// local stack's rie.
func startEcho(t *testing.T, env map[string]string) (*Function, *bytes.Buffer) {
	t.Helper()
	bin := testenv.Require(t, "AWS_LAMBDA_RIE")
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bootstrap := filepath.Join(t.TempDir(), "echo", "bootstrap")
	if err := Build(ctx, root, "./internal/lambdatest/testdata/echo", bootstrap); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer // written by rie's pipe copier; read after Stop
	f, err := Start(ctx, Spec{RIE: bin, Bootstrap: bootstrap, Env: env, Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "echo" {
		t.Errorf("name %q, want the bootstrap's folder", f.Name)
	}
	return f, &out
}

// A handler that overruns AWS_LAMBDA_FUNCTION_TIMEOUT is a function error,
// as on Lambda, though rie answers it with a 200 and plain text.
func TestTimeout(t *testing.T) {
	t.Parallel()
	f, out := startEcho(t, map[string]string{"AWS_LAMBDA_FUNCTION_TIMEOUT": "1"})
	defer f.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := f.Invoke(ctx, []byte(`{"sleep":"3s"}`))
	var e *Error
	if !errors.As(err, &e) || e.Type != TimeoutType || !IsFunctionError(err) {
		f.Stop()
		t.Fatalf("want a timeout, got %v\n%s", err, out)
	}
}

// After Stop no bootstrap is left running. (rie's own shutdown on SIGTERM,
// and a bootstrap whose Runtime API connection drops, end it as well; the
// pid signal in Stop is for a rie that needs the SIGKILL.)
func TestStopEndsBootstrap(t *testing.T) {
	t.Parallel()
	f, out := startEcho(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.Invoke(ctx, []byte(`{}`)); err != nil { // rie starts the bootstrap on the first invocation
		f.Stop()
		t.Fatalf("%v\n%s", err, out)
	}
	children := childPids(f.Pid())
	if len(children) == 0 {
		f.Stop()
		t.Fatal("no bootstrap process under rie")
	}
	f.Stop()
	f.Stop() // idempotent
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		alive := slices.ContainsFunc(children, func(pid int) bool {
			// A process is gone once it is not in /proc or only a zombie
			// waiting for a reaper.
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			return err == nil && !bytes.Contains(b, []byte(") Z "))
		})
		if !alive {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("bootstrap %v still running after Stop", children)
		}
	}
}
