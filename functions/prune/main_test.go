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

// The real bootstrap under aws-lambda-rie, invoked with a Scheduler Input,
// prunes the test database with the template's retentions and answers
// with the JSON of docs/design.md §6b; it logs one JSON line for the pass
// and one EMF line with its metrics.
func TestEndToEndScheduledPass(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mustExec := func(sql string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// 6 deliveries acked two days ago, 2 acked an hour ago, 1 dead for 8
	// days, 1 pending for a month.
	mustExec(`INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, created_at, delivered_at, acked_at)
		SELECT 'agent', 'work', '\x00'::bytea, 'acked', 1, now() - interval '3 days', now() - interval '2 days', now() - interval '2 days'
		FROM generate_series(1, 6)`)
	mustExec(`INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, created_at, delivered_at, acked_at)
		SELECT 'agent', 'work', '\x00'::bytea, 'acked', 1, now() - interval '3 days', now() - interval '1 hour', now() - interval '1 hour'
		FROM generate_series(1, 2)`)
	mustExec(`INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, created_at, delivered_at, dead_at)
		VALUES ('agent', 'work', '\x00', 'dead', 11, now() - interval '9 days', now() - interval '9 days', now() - interval '8 days')`)
	mustExec(`INSERT INTO outbox.deliveries (recipient, kind, payload, created_at) VALUES ('agent', 'work', '\x00', now() - interval '30 days')`)
	// Events 1..20 recorded 10 days ago; the fill has passed 15; a
	// consumer has taken 12.
	mustExec(`INSERT INTO outbox.events (sequence, xid, topic, payload, recorded_at)
		SELECT g, '5'::xid8, 'seeded', '{}', now() - interval '10 days' FROM generate_series(1, 20) g`)
	mustExec(`SELECT setval('outbox.events_sequence_seq', 20)`)
	mustExec(`UPDATE outbox.fill_state SET started = true, watermark = 15`)
	mustExec(`SELECT outbox.commit_position('ledger', 12)`)

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
	var out map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("response %s: %v", body, err)
	}
	for _, k := range []string{"deleted_deliveries", "deleted_events", "kept_for_consumer", "statements", "duration_ms"} {
		if _, ok := out[k]; !ok {
			t.Fatalf("response %s lacks %q", body, k)
		}
	}
	want := map[string]any{"deleted_deliveries": 7.0, "deleted_acked": 6.0, "deleted_dead": 1.0, "deleted_events": 12.0,
		"kept_for_consumer": "ledger", "watermark": 15.0, "events_upto": 12.0}
	for k, v := range want {
		if out[k] != v {
			t.Errorf("%s = %v, want %v (response %s)", k, out[k], v, body)
		}
	}
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

	found := func(logs string) (logged, emf bool) {
		for _, rec := range lambdatest.JSONLines(logs) {
			if rec["message"] == "prune pass" && rec["requestId"] != nil && rec["deleted_events"] == 12.0 {
				logged = true
			}
			if _, ok := rec["_aws"]; ok && rec["Function"] == "prune" && rec["PruneRuns"] == 1.0 &&
				rec["DeletedDeliveries"] == 7.0 && rec["DeletedEvents"] == 12.0 {
				emf = true
			}
		}
		return logged, emf
	}
	logs := fn.AwaitLogs(func(l string) bool { logged, emf := found(l); return logged && emf })
	if logged, emf := found(logs); !logged || !emf {
		t.Fatalf("pass log line found %v, EMF line found %v in:\n%s", logged, emf, logs)
	}
}

// A bad setting fails the init with a log line naming the variable.
func TestBadConfigFailsInit(t *testing.T) {
	t.Parallel()
	fn := lambdatest.Start(t, lambdatest.Build(t, "prune"), map[string]string{
		"DATABASE_URL":       "postgres://nobody@127.0.0.1:1/none",
		"PRUNE_EVENTS_AFTER": "90 days",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if body, err := fn.Invoke(ctx, []byte(`{}`)); err == nil {
		t.Fatalf("invoke with a bad config succeeded: %s", body)
	}
	if logs := fn.AwaitLogs(func(l string) bool { return strings.Contains(l, "PRUNE_EVENTS_AFTER") }); !strings.Contains(logs, "PRUNE_EVENTS_AFTER") {
		t.Fatalf("init failure does not name PRUNE_EVENTS_AFTER:\n%s", logs)
	}
}
