package main_test

import (
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// The real bootstrap under aws-lambda-rie, invoked with a Scheduler Input,
// prunes the test database with the template's retentions and answers
// with the JSON of docs/design.md §6b; it logs one JSON line for the pass
// and one EMF line with its metrics.
func TestEndToEndScheduledPass(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := testenv.Context(t, 60*time.Second)
	// 6 deliveries acked two days ago, 2 acked an hour ago, 1 dead for 8
	// days, 1 pending for a month.
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, created_at, delivered_at, acked_at)
		SELECT 'agent', 'work', '\x00'::bytea, 'acked', 1, now() - interval '3 days', now() - interval '2 days', now() - interval '2 days'
		FROM generate_series(1, 6)`)
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, created_at, delivered_at, acked_at)
		SELECT 'agent', 'work', '\x00'::bytea, 'acked', 1, now() - interval '3 days', now() - interval '1 hour', now() - interval '1 hour'
		FROM generate_series(1, 2)`)
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, created_at, delivered_at, dead_at)
		VALUES ('agent', 'work', '\x00', 'dead', 11, now() - interval '9 days', now() - interval '9 days', now() - interval '8 days')`)
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload, created_at) VALUES ('agent', 'work', '\x00', now() - interval '30 days')`)
	// Events 1..20 recorded 10 days ago; the fill has passed 15; a
	// consumer has taken 12.
	db.Exec(t, `INSERT INTO outbox.events (sequence, xid, topic, payload, recorded_at)
		SELECT g, '5'::xid8, 'seeded', '{}', now() - interval '10 days' FROM generate_series(1, 20) g`)
	db.Exec(t, `SELECT setval('outbox.events_sequence_seq', 20)`)
	db.Exec(t, `UPDATE outbox.fill_state SET started = true, watermark = 15`)
	db.Exec(t, `SELECT outbox.commit_position('ledger', 12)`)

	fn := lambdatest.Start(t, lambdatest.Build(t, "prune"), map[string]string{
		"DATABASE_URL":       db.URL,
		"PRUNE_EVENTS_AFTER": "168h",
		"PRUNE_BATCH_LIMIT":  "4",
	})
	body, err := fn.Invoke(ctx, []byte(`{"source":"outboxkeeper.schedule"}`))
	if err != nil {
		t.Fatalf("invoke: %v\n%s", err, body)
	}
	t.Logf("response: %s", body)
	out := lambdatest.Response(t, body, "deleted_deliveries", "deleted_events", "kept_for_consumer", "statements", "duration_ms")
	lambdatest.WantFields(t, "the pass", out, map[string]any{"deleted_deliveries": 7.0, "deleted_acked": 6.0, "deleted_dead": 1.0, "deleted_events": 12.0,
		"kept_for_consumer": "ledger", "watermark": 15.0, "events_upto": 12.0})
	var deliveries, events int64
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox.deliveries), (SELECT count(*) FROM outbox.events)`).Scan(&deliveries, &events); err != nil {
		t.Fatal(err)
	}
	if deliveries != 3 {
		t.Errorf("deliveries left = %d, want 3 (2 young acked, 1 pending)", deliveries)
	}
	if events != 8 {
		t.Errorf("events left = %d, want 8 (13..20)", events)
	}

	lambdatest.WantPassLogs(t, fn, "prune", map[string]any{"deleted_events": 12.0},
		map[string]any{"PruneRuns": 1.0, "DeletedDeliveries": 7.0, "DeletedEvents": 12.0})
}

// A bad setting fails the init with a log line naming the variable.
func TestBadConfigFailsInit(t *testing.T) {
	t.Parallel()
	lambdatest.BadConfigFailsInit(t, "prune", "PRUNE_EVENTS_AFTER", "90 days")
}
