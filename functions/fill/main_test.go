package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testdb"
)

// Issue 3, test 13: the real bootstrap under aws-lambda-rie fills a real
// gap when invoked as EventBridge invokes it, and answers the §4 JSON.
func TestEndToEndUnderRIE(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	exec := func(sql string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// publish, burn (a rolled-back writer), publish: a real gap at 2.
	burnOne := func() {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT outbox.publish('t', '{}')`); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}

	bin := lambdatest.Build(t, "fill")
	fn := lambdatest.Start(t, bin, map[string]string{
		"DATABASE_URL":     db.URL,
		"FILL_GRACE":       "300ms",
		"FILL_PASS_BUDGET": "5s",
	})

	invoke := func(payload string) map[string]any {
		t.Helper()
		out, err := fn.Invoke(ctx, []byte(payload))
		if err != nil {
			t.Fatalf("invoke %s: %v\n%s\nlogs:\n%s", payload, err, out, fn.Logs())
		}
		t.Logf("invoke %.40s... -> %s", payload, out)
		var res map[string]any
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("response is not JSON: %s", out)
		}
		for _, k := range []string{"watermark", "head", "filled", "stalled_at", "waiting", "blocked_by", "statements", "duration_ms"} {
			if _, ok := res[k]; !ok {
				t.Fatalf("response lacks %q: %s", k, out)
			}
		}
		return res
	}

	// EventBridge Scheduler passes its Input verbatim; first run anchors.
	exec(`SELECT outbox.publish('t', '{}')`)
	if res := invoke(`{"source":"outboxkeeper.schedule"}`); res["watermark"] != 1.0 || res["waiting"] != nil {
		t.Fatalf("first run: %v", res)
	}
	burnOne()
	exec(`SELECT outbox.publish('t', '{}')`)

	// A classic scheduled-event envelope.
	envelope := `{"version":"0","id":"53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa","detail-type":"Scheduled Event",
		"source":"aws.events","account":"123456789012","time":"2026-01-01T00:00:00Z","region":"us-east-1",
		"resources":["arn:aws:events:us-east-1:123456789012:rule/fill"],"detail":{}}`
	res := invoke(envelope)
	if res["filled"] != 1.0 || res["watermark"] != 3.0 || res["head"] != 3.0 || res["waiting"] != nil || res["stalled_at"] != nil {
		t.Fatalf("want the gap at 2 filled within the pass (grace waited out); got %v", res)
	}
	if bl, ok := res["blocked_by"].([]any); !ok || len(bl) != 0 {
		t.Fatalf("blocked_by must be an empty list: %v", res["blocked_by"])
	}
	if res["statements"].(float64) < 1 {
		t.Fatalf("statements: %v", res)
	}
	var filledBy string
	if err := db.Pool.QueryRow(ctx, `SELECT filled_by FROM outbox.events WHERE sequence = 2`).Scan(&filledBy); err != nil || filledBy != "fill" {
		t.Fatalf("sequence 2: %q %v", filledBy, err)
	}

	// `{}` too; caught up now.
	if res := invoke(`{}`); res["filled"] != 0.0 || res["watermark"] != 3.0 {
		t.Fatalf("caught-up pass: %v", res)
	}

	// One JSON log line per pass carrying the request id, and EMF metrics.
	count := func(logs string) (passes, emf, withoutID int) {
		for _, line := range lambdatest.JSONLines(logs) {
			if line["message"] == "fill pass" {
				passes++
				if line["requestId"] == nil {
					withoutID++
				}
			}
			if _, ok := line["_aws"]; ok {
				emf++
			}
		}
		return passes, emf, withoutID
	}
	logs := fn.AwaitLogs(func(l string) bool { p, e, _ := count(l); return p >= 3 && e >= 3 })
	if passes, emf, withoutID := count(logs); passes != 3 || emf != 3 || withoutID != 0 {
		t.Fatalf("want 3 pass log lines with a requestId and 3 EMF lines; got %d (%d without), %d\n%s", passes, withoutID, emf, logs)
	}
	if !strings.Contains(logs, `"PassDurationMs"`) {
		t.Fatal("no PassDurationMs metric")
	}
}

// A bad configuration fails the init, naming the variable.
func TestBadConfigFailsInit(t *testing.T) {
	t.Parallel()
	bin := lambdatest.Build(t, "fill")
	fn := lambdatest.Start(t, bin, map[string]string{
		"DATABASE_URL":     "postgres://nobody@127.0.0.1:1/x",
		"FILL_BATCH_LIMIT": "zero",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := fn.Invoke(ctx, []byte(`{}`)); err == nil {
		t.Fatal("invocation succeeded with FILL_BATCH_LIMIT=zero")
	}
	if logs := fn.AwaitLogs(func(l string) bool { return strings.Contains(l, "FILL_BATCH_LIMIT") }); !strings.Contains(logs, "FILL_BATCH_LIMIT") {
		t.Fatalf("the init error does not name the variable:\n%s", logs)
	}
}
