package main_test

import (
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// scheduledEvent is the classic EventBridge (CloudWatch Events) envelope a
// `rate(1 minute)` rule delivers.
const scheduledEvent = `{
  "version": "0",
  "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
  "detail-type": "Scheduled Event",
  "source": "aws.events",
  "account": "123456789012",
  "time": "2026-01-01T00:00:00Z",
  "region": "us-east-1",
  "resources": ["arn:aws:events:us-east-1:123456789012:rule/outboxkeeper-sweep"],
  "detail": {}
}`

// The real bootstrap under aws-lambda-rie, invoked with a
// scheduled event, sweeps the test database and answers with the JSON of docs/design.md §6;
// it logs one JSON line for the pass and one EMF line with its metrics.
func TestEndToEndScheduledEvent(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := testenv.Context(t, 60*time.Second)
	// 5 stuck deliveries, 2 stuck at the redelivery limit, 1 pending for an
	// hour, 1 delivered a moment ago.
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, redeliveries, created_at, delivered_at)
		SELECT 'agent:' || g, 'work', '\x00'::bytea, 'delivered', 3, CASE WHEN g <= 2 THEN 2 ELSE 0 END,
		       now() - interval '1 hour', now() - interval '10 minutes'
		FROM generate_series(1, 7) g`)
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload, created_at) VALUES ('agent:p', 'work', '\x00', now() - interval '1 hour')`)
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, delivered_at) VALUES ('agent:f', 'work', '\x00', 'delivered', 1, now())`)

	fn := lambdatest.Start(t, lambdatest.Build(t, "sweep"), map[string]string{
		"DATABASE_URL":           db.URL,
		"SWEEP_STUCK_AFTER":      "2m",
		"SWEEP_MAX_REDELIVERIES": "2",
		"SWEEP_BATCH_LIMIT":      "3",
	})
	body, err := fn.Invoke(ctx, []byte(scheduledEvent))
	if err != nil {
		t.Fatalf("invoke: %v\n%s", err, body)
	}
	out := lambdatest.Response(t, body, "reset", "dead", "stuck_pending", "open", "oldest_open_age_s", "woken", "statements", "duration_ms")
	// Open work as found at the start of the pass: 7 stuck + 1 pending + 1 fresh.
	// Batches of 3 over 7 stuck rows: 3 reset statements.
	lambdatest.WantFields(t, "first pass", out, map[string]any{"reset": 5.0, "dead": 2.0, "stuck_pending": 1.0, "open": 9.0, "woken": true, "statements": 6.0})
	if age, _ := out["oldest_open_age_s"].(float64); age < 3590 || age > 3700 {
		t.Errorf("oldest_open_age_s = %v, want about 3600", out["oldest_open_age_s"])
	}
	var states string
	if err := db.Pool.QueryRow(ctx, `SELECT string_agg(state || ':' || count, ',' ORDER BY state) FROM
		(SELECT state, count(*) FROM outbox.deliveries GROUP BY state) s`).Scan(&states); err != nil {
		t.Fatal(err)
	}
	if states != "dead:2,delivered:1,pending:6" {
		t.Errorf("rows after the pass: %s, want dead:2,delivered:1,pending:6", states)
	}

	lambdatest.WantPassLogs(t, fn, "sweep", map[string]any{"reset": 5.0},
		map[string]any{"SweepRuns": 1.0, "Redeliveries": 5.0, "DeadLettered": 2.0, "OpenDeliveries": 9.0})

	// A warm second invocation with a different input finds nothing new
	// to reset; the reset rows now wait as stuck pending.
	body, err = fn.Invoke(ctx, []byte(`{}`))
	if err != nil {
		t.Fatalf("second invoke: %v\n%s", err, body)
	}
	lambdatest.WantFields(t, "second pass", lambdatest.Response(t, body), map[string]any{"reset": 0.0, "dead": 0.0, "stuck_pending": 6.0})
}

// A bad setting fails the init with a log line naming the variable.
func TestBadConfigFailsInit(t *testing.T) {
	t.Parallel()
	lambdatest.BadConfigFailsInit(t, "sweep", "SWEEP_BATCH_LIMIT", "lots")
}
