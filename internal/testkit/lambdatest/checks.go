package lambdatest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Response decodes an invocation's JSON answer, failing the test when it is
// not JSON or lacks one of keys.
func Response(t testing.TB, body []byte, keys ...string) map[string]any {
	t.Helper()
	var res map[string]any
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatalf("response is not JSON: %s", body)
	}
	for _, k := range keys {
		if _, ok := res[k]; !ok {
			t.Fatalf("response lacks %q: %s", k, body)
		}
	}
	return res
}

// WantFields checks fields of a JSON response, one by one (numbers decode
// as float64, null as nil).
func WantFields(t testing.TB, what string, res map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if res[k] != v {
			t.Errorf("%s: %s = %v, want %v (response %v)", what, k, res[k], v, res)
		}
	}
}

// BadConfigFailsInit is every function's init-validation test: started
// with a DATABASE_URL nobody listens on and variable=value, the invocation
// fails and the function's output names the variable.
func BadConfigFailsInit(t *testing.T, function, variable, value string) {
	t.Helper()
	fn := Start(t, Build(t, function), map[string]string{
		"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
		variable:       value,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if body, err := fn.Invoke(ctx, []byte(`{}`)); err == nil {
		t.Fatalf("invocation succeeded with %s=%s: %s", variable, value, body)
	}
	if logs := fn.AwaitLogs(func(l string) bool { return strings.Contains(l, variable) }); !strings.Contains(logs, variable) {
		t.Fatalf("the init failure does not name %s:\n%s", variable, logs)
	}
}

// BlockedAnswersBeforeDeadline builds and starts the function pkg on
// databaseURL with AWS_LAMBDA_FUNCTION_TIMEOUT=deadline and its defaults
// otherwise, and checks AnswersBeforeDeadline of payload: the timeout the
// function runs under and the deadline checked are one number.
func BlockedAnswersBeforeDeadline(t testing.TB, ctx context.Context, pkg, databaseURL string, payload []byte, deadline time.Duration, logWants ...string) map[string]any {
	t.Helper()
	fn := Start(t, Build(t, pkg), map[string]string{
		"DATABASE_URL":                databaseURL,
		"AWS_LAMBDA_FUNCTION_TIMEOUT": fmt.Sprint(int(deadline.Seconds())),
	})
	return AnswersBeforeDeadline(t, ctx, fn, payload, deadline, logWants...)
}

// AnswersBeforeDeadline invokes fn, started with
// AWS_LAMBDA_FUNCTION_TIMEOUT=deadline while a statement of its pass is
// blocked, and checks that the pass ended on its budget: the invocation
// answers before the deadline with timed_out naming the statement timeout,
// the output holds each of logWants and the metrics line, and the
// invocation was not killed. It returns the response for further checks.
func AnswersBeforeDeadline(t testing.TB, ctx context.Context, fn *Function, payload []byte, deadline time.Duration, logWants ...string) map[string]any {
	t.Helper()
	start := time.Now()
	out, err := fn.Invoke(ctx, payload)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("invoke: %v\n%s", err, out)
	}
	res := Response(t, out)
	if timedOut, _ := res["timed_out"].(string); !strings.Contains(timedOut, "statement timeout") {
		t.Errorf("timed_out = %q, want the statement the budget ended", timedOut)
	}
	if took >= deadline {
		t.Errorf("answered after %s, want before the %s deadline", took, deadline)
	}
	logs := fn.AwaitLogs(func(l string) bool {
		return strings.Contains(l, `"PassDurationMs"`) && strings.Contains(l, `"timed_out"`)
	})
	for _, want := range logWants {
		if !strings.Contains(logs, want) {
			t.Errorf("no %s in the output:\n%s", want, logs)
		}
	}
	if !strings.Contains(logs, `"PassDurationMs"`) {
		t.Errorf("no metrics line:\n%s", logs)
	}
	if strings.Contains(logs, "Task timed out") {
		t.Errorf("the invocation was killed by its timeout:\n%s", logs)
	}
	return res
}

// WantPassLogs waits for the two lines a pass of function logs and checks
// each: its JSON line ("<function> pass", with a requestId and the fields
// of line) and its EMF line (an _aws record of function with the metrics
// of emf). Numbers are float64, as JSON decodes them.
func WantPassLogs(t testing.TB, fn *Function, function string, line, emf map[string]any) {
	t.Helper()
	found := func(logs string) (logged, emitted bool) {
		for _, rec := range JSONLines(logs) {
			if rec["message"] == function+" pass" && rec["requestId"] != nil && has(rec, line) {
				logged = true
			}
			if _, ok := rec["_aws"]; ok && rec["Function"] == function && has(rec, emf) {
				emitted = true
			}
		}
		return logged, emitted
	}
	logs := fn.AwaitLogs(func(l string) bool { logged, emitted := found(l); return logged && emitted })
	logged, emitted := found(logs)
	if !logged {
		t.Errorf("no %s pass log line with a requestId and %v in:\n%s", function, line, logs)
	}
	if !emitted {
		t.Errorf("no EMF line with the pass's metrics %v in:\n%s", emf, logs)
	}
}

// has reports whether rec holds every field of want.
func has(rec, want map[string]any) bool {
	for k, v := range want {
		if rec[k] != v {
			return false
		}
	}
	return true
}
