package main_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// A statement blocked on a lock another session holds ends the pass on its
// budget: with a 4 s Lambda timeout the invocation still answers, logs its
// line and emits its metrics, instead of "Task timed out".
func TestLockedDeliveriesAnswerBeforeTheLambdaDeadline(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := db.Connect(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if _, err := tx.Exec(ctx, `LOCK TABLE outbox.deliveries IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	fn := lambdatest.Start(t, lambdatest.Build(t, "sweep"), map[string]string{
		"DATABASE_URL":                db.URL,
		"AWS_LAMBDA_FUNCTION_TIMEOUT": "4",
	})
	start := time.Now()
	out, err := fn.Invoke(ctx, []byte(scheduledEvent))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("invoke: %v\n%s", err, out)
	}
	var res map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("response is not JSON: %s", out)
	}
	if timedOut, _ := res["timed_out"].(string); !strings.Contains(timedOut, "statement timeout") {
		t.Errorf("timed_out = %q, want the statement the budget ended", timedOut)
	}
	if took >= 4*time.Second {
		t.Errorf("answered after %s, want before the 4 s deadline", took)
	}
	logs := fn.AwaitLogs(func(l string) bool {
		return strings.Contains(l, `"PassDurationMs"`) && strings.Contains(l, `"timed_out"`)
	})
	if !strings.Contains(logs, `"message":"sweep pass"`) {
		t.Errorf("no pass log line:\n%s", logs)
	}
	if !strings.Contains(logs, `"PassDurationMs"`) {
		t.Errorf("no metrics line:\n%s", logs)
	}
	if strings.Contains(logs, "Task timed out") {
		t.Errorf("the invocation was killed by its timeout:\n%s", logs)
	}
}
