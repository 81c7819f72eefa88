package lambdatest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/rie"
)

const echoPkg = "./internal/testkit/lambdatest/testdata/echo"

func TestNormalizeNamesPackagesFromTheModuleRoot(t *testing.T) {
	for in, want := range map[string]string{
		"fill":                    "./functions/fill",
		"functions/sweep":         "./functions/sweep",
		"./functions/compensate/": "./functions/compensate",
		"./internal/testkit/lambdatest/testdata/echo": echoPkg,
	} {
		if got := normalize(in); got != want {
			t.Errorf("normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEchoThroughRIE(t *testing.T) {
	bin := Build(t, echoPkg)
	if again := Build(t, echoPkg); again != bin {
		t.Fatalf("second Build gave %s, want cached %s", again, bin)
	}
	fn := Start(t, bin, map[string]string{"ECHO_VAR": "hello"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var out struct {
		Input map[string]any `json:"input"`
		Env   string         `json:"env"`
	}
	if err := fn.InvokeJSON(ctx, map[string]any{"n": 1, "s": "x"}, &out); err != nil {
		t.Fatal(err)
	}
	if out.Env != "hello" {
		t.Errorf("env = %q, want the configured hello", out.Env)
	}
	if out.Input["s"] != "x" {
		t.Errorf("input s = %v, want x", out.Input["s"])
	}
	if out.Input["n"] != float64(1) {
		t.Errorf("input n = %v, want 1", out.Input["n"])
	}

	// A second invocation reuses the warm environment, as Lambda does.
	body, err := fn.Invoke(ctx, []byte(`{"second":true}`))
	if err != nil {
		t.Fatalf("second invoke: %v\n%s", err, body)
	}
	if !strings.Contains(string(body), `"second":true`) {
		t.Errorf("second invoke answered %s, want its input echoed", body)
	}

	// A handler error comes back as a Lambda error object.
	body, err = fn.Invoke(ctx, []byte(`{"fail":true}`))
	var fe *rie.Error
	if !errors.As(err, &fe) {
		t.Fatalf("invoke of a failing handler = %v (body %s), want a *rie.Error", err, body)
	}
	if fe.Message != "asked to fail" {
		t.Errorf("error message %q, want the handler's \"asked to fail\"", fe.Message)
	}
	if !rie.IsFunctionError(err) {
		t.Errorf("IsFunctionError(%v) = false, want true", err)
	}

	// The function's slog records are JSON lines carrying the request id.
	found := func(logs string) bool {
		for _, rec := range JSONLines(logs) {
			if rec["message"] == "echo" && rec["requestId"] != nil && rec["level"] != nil {
				return true
			}
		}
		return false
	}
	if logs := fn.AwaitLogs(found); !found(logs) {
		t.Fatalf("no JSON log line with message/requestId/level in:\n%s", logs)
	}
}

// Two environments side by side must not collide on rie's Runtime API port.
func TestTwoFunctionsConcurrently(t *testing.T) {
	bin := Build(t, echoPkg)
	a := Start(t, bin, map[string]string{"ECHO_VAR": "a"})
	b := Start(t, bin, map[string]string{"ECHO_VAR": "b"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for name, fn := range map[string]*Function{"a": a, "b": b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out struct{ Env string }
			if err := fn.InvokeJSON(ctx, json.RawMessage(`{}`), &out); err != nil {
				t.Errorf("%s: %v", name, err)
			} else if out.Env != name {
				t.Errorf("%s answered env %q", name, out.Env)
			}
		}()
	}
	wg.Wait()
}
