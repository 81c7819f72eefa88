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

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/syncbuf"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

func TestAnswerErrorTellsErrorDocumentsFromHandlerOutput(t *testing.T) {
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
	// mustError is the error answerError takes the answer for; the subtest
	// ends when it takes it for output.
	mustError := func(t *testing.T, status int, body string) *Error {
		t.Helper()
		e := answerError(status, []byte(body))
		if e == nil {
			t.Fatalf("HTTP %d %s taken for output, want an error", status, body)
		}
		return e
	}
	t.Run("error document", func(t *testing.T) {
		e := mustError(t, http.StatusOK, `{"errorMessage":"boom","errorType":"errorString"}`)
		if e.Type != "errorString" {
			t.Errorf("Type %q, want errorString", e.Type)
		}
		if e.Message != "boom" {
			t.Errorf("Message %q, want boom", e.Message)
		}
		if !IsFunctionError(e) {
			t.Errorf("IsFunctionError = false, want true: %#v", e)
		}
	})
	// aws-lambda-go's panic document: the trace holds frame objects.
	t.Run("panic document", func(t *testing.T) {
		e := mustError(t, http.StatusOK, `{"errorMessage":"p","errorType":"runtime.Error","stackTrace":[{"path":"x.go","line":1,"label":"f"}]}`)
		if e.Message != "p" {
			t.Errorf("Message %q, want p", e.Message)
		}
		if len(e.Trace) == 0 {
			t.Errorf("no Trace, want its frames: %#v", e)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		e := mustError(t, http.StatusOK, "Task timed out after 1.00 seconds")
		if e.Type != TimeoutType {
			t.Errorf("Type %q, want %q", e.Type, TimeoutType)
		}
		if !IsFunctionError(e) {
			t.Errorf("IsFunctionError = false, want true: %#v", e)
		}
	})
	// A refused invocation is an error, but not the function's.
	t.Run("HTTP 400", func(t *testing.T) {
		e := mustError(t, http.StatusBadRequest, `{"watermark":1}`)
		if e.Status != http.StatusBadRequest {
			t.Errorf("Status %d, want 400", e.Status)
		}
		if IsFunctionError(e) {
			t.Errorf("IsFunctionError = true, want false: %#v", e)
		}
		if !strings.Contains(e.Error(), "HTTP 400") {
			t.Errorf("Error() = %q, want it to say HTTP 400", e.Error())
		}
	})
}

func TestEnvironmentIsLambdasNotTheCallers(t *testing.T) {
	t.Setenv("OUTBOXKEEPER_LEAK", "x")
	env := Environment("fn", map[string]string{"A": "1", "AWS_LAMBDA_LOG_FORMAT": "", "AWS_LAMBDA_FUNCTION_TIMEOUT": "5"})
	for _, want := range []string{"A=1", "AWS_LAMBDA_FUNCTION_NAME=fn", "AWS_LAMBDA_FUNCTION_TIMEOUT=5"} {
		if !slices.Contains(env, want) {
			t.Errorf("%s missing from %v", want, env)
		}
	}
	// Not the caller's variables, and not a default the Env emptied.
	for _, kv := range env {
		for _, unwanted := range []string{"OUTBOXKEEPER_LEAK=", "AWS_LAMBDA_LOG_FORMAT=", "HOME="} {
			if strings.HasPrefix(kv, unwanted) {
				t.Errorf("%s should not be in the environment", kv)
			}
		}
	}
}

// startEcho builds the harness's echo function and starts it under the
// local stack's rie.
func startEcho(t *testing.T, env map[string]string) (*Function, *syncbuf.Buffer) {
	t.Helper()
	bin := testenv.Require(t, "AWS_LAMBDA_RIE")
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bootstrap := filepath.Join(t.TempDir(), "echo", "bootstrap")
	if err := Build(ctx, root, "./internal/testkit/lambdatest/testdata/echo", bootstrap); err != nil {
		t.Fatal(err)
	}
	out := &syncbuf.Buffer{} // written by rie's pipe copier
	f, err := Start(ctx, Spec{RIE: bin, Bootstrap: bootstrap, Env: env, Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "echo" {
		t.Errorf("name %q, want the bootstrap's folder", f.Name)
	}
	return f, out
}

// A handler that overruns AWS_LAMBDA_FUNCTION_TIMEOUT is a function error,
// as on Lambda, though rie answers it with a 200 and plain text.
func TestOverrunningTheTimeoutIsAFunctionError(t *testing.T) {
	t.Parallel()
	f, out := startEcho(t, map[string]string{"AWS_LAMBDA_FUNCTION_TIMEOUT": "1"})
	defer f.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := f.Invoke(ctx, []byte(`{"sleep":"3s"}`))
	var e *Error
	if !errors.As(err, &e) {
		f.Stop()
		t.Fatalf("invoke = %v, want a *rie.Error\n%s", err, out)
	}
	if e.Type != TimeoutType {
		t.Errorf("error type %q, want %q", e.Type, TimeoutType)
	}
	if !IsFunctionError(err) {
		t.Errorf("IsFunctionError(%v) = false, want true, as on Lambda", err)
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
		t.Fatalf("first invoke: %v\n%s", err, out)
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

func TestInitDurationReadsTheFirstInitReport(t *testing.T) {
	out := "01 Dec 2026 11:18:15,736 [INFO] (rapid) INIT RTDONE(status: success)\n" +
		"01 Dec 2026 11:18:15,736 [INFO] (rapid) INIT REPORT(durationMs: 30.311000)\n" +
		"01 Dec 2026 11:18:15,737 [INFO] (rapid) INIT REPORT(durationMs: 0.069000)\n"
	d, ok := InitDuration(out)
	if !ok {
		t.Fatal("InitDuration found no INIT REPORT")
	}
	if d != 30311*time.Microsecond {
		t.Errorf("InitDuration = %v, want the first report's 30.311ms", d)
	}
	if _, ok := InitDuration("START RequestId: x\n"); ok {
		t.Error("InitDuration found a report in output without one")
	}
}
