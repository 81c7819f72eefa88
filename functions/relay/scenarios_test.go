package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// Tests that hold a transaction open (or need the fill's proof, which any
// open transaction of the cluster holds back) do not run in parallel:
// Go runs them one after another before the parallel ones.

// An event the target refuses for itself holds only its group: the rest
// of the batch goes; the position stays before it; it is tried
// RELAY_MAX_ATTEMPTS times, across passes, then parked with the target's
// error, the RelayParked metric fires, and the stream goes on, its group
// in order.
func TestRefusedEventIsParkedAndTheStreamGoesOnInOrder(t *testing.T) {
	t.Parallel()
	db, q := testdb.New(t), sqstest.Client(t)
	url := sqstest.NewQueue(t, q, "relay-park", map[string]string{"FifoQueue": "true"})
	a1 := publish(t, db, "a", "", `{"n":1}`)
	bad := publish(t, db, "a", "", badPayload)[0]
	b := publish(t, db, "b", "", `{"n":3}`, `{"n":4}`)
	a2 := publish(t, db, "a", "", `{"n":5}`)
	// A budget too short to park: two tries, then the pass ends.
	fn := relayFn(t, db, map[string]string{"RELAY_TARGET": url, "RELAY_MAX_ATTEMPTS": "3", "RELAY_PASS_BUDGET": "300ms", "RELAY_TICK": "100ms"})
	first := invoke(t, fn)
	if first.Position != a1[0] {
		t.Errorf("first pass: position %d, want %d (before the refused %d)", first.Position, a1[0], bad)
	}
	if first.WaitingFor() != "event" || first.StoppedAt == nil || *first.StoppedAt != bad {
		t.Errorf("first pass: waiting %q stopped_at %v, want event at %d", first.WaitingFor(), first.StoppedAt, bad)
	}
	if !strings.Contains(first.LastError, "InvalidMessageContents") {
		t.Errorf("last_error %q, want the target's InvalidMessageContents", first.LastError)
	}
	if first.Parked != 0 {
		t.Errorf("first pass parked %d, want none yet", first.Parked)
	}
	tries := testdb.Scalar[int](t, db.Pool, `SELECT attempts FROM outbox.relay_parked WHERE sequence = $1 AND parked_at IS NULL`, bad)
	if tries < 1 || tries >= 3 {
		t.Fatalf("%d tries after the first pass, want 1 or 2 (the budget ended first)", tries)
	}
	// The next pass counts on from there and parks it.
	fn2 := relayFn(t, db, map[string]string{"RELAY_TARGET": url, "RELAY_MAX_ATTEMPTS": "3", "RELAY_TICK": "100ms"})
	second := invoke(t, fn2)
	if second.Parked != 1 || second.Position != a2[0] || second.WaitingFor() != "" {
		t.Errorf("second pass: parked %d position %d waiting %q, want 1, %d, none", second.Parked, second.Position, second.WaitingFor(), a2[0])
	}
	var attempts int
	var errText string
	db.Pool.QueryRow(t.Context(), `SELECT attempts, error FROM outbox.relay_parked WHERE sequence = $1 AND parked_at IS NOT NULL`, bad).Scan(&attempts, &errText)
	if attempts != 3 || !strings.HasPrefix(errText, "InvalidMessageContents") {
		t.Errorf("parked row: attempts %d error %q, want 3 and the target's code", attempts, errText)
	}
	msgs := drain(t, q, url, 4, 10*time.Second)
	msgs = append(msgs, drain(t, q, url, 1, 2*time.Second)...)
	exactlyOnceInOrder(t, msgs, []int64{a1[0], b[0], b[1], a2[0]}, byTopic)
	parked := 0.0
	for _, m := range emf(fn2.AwaitLogs(func(l string) bool { return strings.Contains(l, `"RelayParked"`) })) {
		if v, ok := m["RelayParked"].(float64); ok {
			parked += v
		}
		if m["Function"] != "relay:default" || m["Stack"] != "relay-test" {
			t.Errorf("EMF dimensions Function=%v Stack=%v, want relay:default and relay-test", m["Function"], m["Stack"])
		}
	}
	if parked != 1 {
		t.Errorf("RelayParked in the EMF lines: %v, want 1", parked)
	}
}

// RELAY_MAX_ATTEMPTS=0 never parks: the relay stops at the refused event,
// answers normally waiting on it, and says so in RelayStopped; no later
// batch is read, so nothing after it is sent. (Batches of two here: within
// one call the target may take a group's entries after the refused one,
// the caveat TestRefusedEventIsParkedAndTheStreamGoesOnInOrder meets.)
func TestMaxAttemptsZeroStopsAtTheEvent(t *testing.T) {
	t.Parallel()
	db, q := testdb.New(t), sqstest.Client(t)
	url := sqstest.NewQueue(t, q, "relay-stop", map[string]string{"FifoQueue": "true"})
	first := publish(t, db, "a", "", `{"n":1}`)[0]
	bad := publish(t, db, "a", "", badPayload)[0]
	publish(t, db, "a", "", `{"n":3}`, `{"n":4}`)
	fn := relayFn(t, db, map[string]string{"RELAY_TARGET": url, "RELAY_MAX_ATTEMPTS": "0", "RELAY_BATCH_LIMIT": "2",
		"RELAY_PASS_BUDGET": "1500ms", "RELAY_TICK": "100ms"})
	r := invoke(t, fn)
	if r.Position != first || r.WaitingFor() != "event" || r.StoppedAt == nil || *r.StoppedAt != bad || r.Error != "" {
		t.Errorf("position %d waiting %q stopped_at %v error %q, want %d, event at %d, none", r.Position, r.WaitingFor(), r.StoppedAt, r.Error, first, bad)
	}
	if r.Parked != 0 || r.Refused < 2 {
		t.Errorf("parked %d refused %d, want none parked and several tries", r.Parked, r.Refused)
	}
	if n := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.relay_parked WHERE parked_at IS NOT NULL`); n != 0 {
		t.Errorf("%d parked rows, want none", n)
	}
	msgs := drain(t, q, url, 3, 2*time.Second)
	exactlyOnceInOrder(t, msgs, []int64{first}, byTopic)
	logs := fn.AwaitLogs(func(l string) bool { return strings.Contains(l, `"RelayStopped"`) })
	if !strings.Contains(logs, `"RelayStopped":1`) {
		t.Errorf("no RelayStopped 1 in the EMF line:\n%s", logs)
	}
}

// A target that accepts connections and never answers costs the pass its
// budget, not the invocation: the pass answers normally at its budget,
// waiting on the target, its position where it was.
func TestTargetThatTimesOutEndsThePassAtItsBudget(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	publish(t, db, "a", "", `{"n":1}`)
	fn := relayFn(t, db, map[string]string{
		"RELAY_TARGET":                "https://sqs.us-east-1.amazonaws.com/123456789012/silent",
		"AWS_ENDPOINT_URL_SQS":        silentListener(t),
		"RELAY_PASS_BUDGET":           "2s",
		"AWS_LAMBDA_FUNCTION_TIMEOUT": "6",
	})
	r := invoke(t, fn)
	if r.WaitingFor() != "target" || r.Position != 0 || r.Sent != 0 || r.Error != "" {
		t.Errorf("waiting %q position %d sent %d error %q, want target, 0, 0, none", r.WaitingFor(), r.Position, r.Sent, r.Error)
	}
	if !strings.Contains(r.LastError, "DeadlineExceeded") {
		t.Errorf("last_error %q, want the call's deadline", r.LastError)
	}
}

// A crash after the target took a batch and before the position was
// committed: the next pass sends the batch again with the same dedup ids,
// and the FIFO queue delivers it once.
func TestCrashBetweenTheSendAndTheCommitResendsWithTheSameDedupIDs(t *testing.T) {
	db, q := testdb.New(t), sqstest.Client(t)
	url := sqstest.NewQueue(t, q, "relay-crash", map[string]string{"FifoQueue": "true"})
	env := map[string]string{"RELAY_TARGET": url, "RELAY_PASS_BUDGET": "20s"}
	invoke(t, relayFn(t, db, env)) // registers the relay at 0
	seqs := publish(t, db, "a", "", payloads(25)...)

	// Hold the relay's consumer row, so its commit waits after the send.
	ctx := context.Background()
	locker := db.Connect(t)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT * FROM outbox.consumers WHERE name = 'relay:default' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	fn := relayFn(t, db, env)
	done := make(chan struct{})
	go func() { defer close(done); _, _ = fn.Invoke(ctx, schedule) }()
	firstDelivery := drain(t, q, url, len(seqs), 15*time.Second)
	exactlyOnceInOrder(t, firstDelivery, seqs, byTopic)
	// The batch is in the queue and the commit waits: crash there. The
	// server-side statement dies with its session, so it never commits.
	waitFor(t, "the relay's commit to wait on the lock", func() bool {
		return testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'outboxkeeper-relay' AND wait_event_type = 'Lock'`) == 1
	})
	fn.Kill()
	<-done
	db.Exec(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'outboxkeeper-relay'`)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if p := position(t, db, "default"); p != 0 {
		t.Fatalf("position %d after the crash, want 0 (never committed)", p)
	}
	// The dead pass's lease runs out on its own (pass.MinLeaseTTL).
	waitFor(t, "the crashed pass's lease to run out", func() bool {
		return testdb.Scalar[bool](t, db.Pool, `SELECT expires_at <= now() FROM outbox.leases WHERE name = 'relay:default'`)
	})

	r := invoke(t, relayFn(t, db, env))
	if r.Sent != int64(len(seqs)) || r.Position != seqs[len(seqs)-1] {
		t.Errorf("after the crash: sent %d position %d, want the batch again (%d) and %d", r.Sent, r.Position, len(seqs), seqs[len(seqs)-1])
	}
	if again := drain(t, q, url, 1, 2*time.Second); len(again) != 0 {
		t.Errorf("the FIFO queue delivered %d messages again, want none (same dedup ids)", len(again))
	}
}

// The relay never passes a sequence whose writer may still commit: an open
// writer holds it back and its event goes, in order, once it commits; a
// rolled-back writer's gap holds it back until the fill proves it, and the
// placeholder is passed, never sent.
func TestRelayNeverPassesAnUnprovenGap(t *testing.T) {
	db, q := testdb.New(t), sqstest.Client(t)
	url := sqstest.NewQueue(t, q, "relay-gap", map[string]string{"FifoQueue": "true"})
	ctx := context.Background()
	fn := relayFn(t, db, map[string]string{"RELAY_TARGET": url})

	one := publish(t, db, "a", "", `{"n":1}`)[0]
	writer := db.Connect(t)
	wtx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer wtx.Rollback(ctx) //nolint:errcheck
	held := testdb.Scalar[int64](t, wtx, `SELECT outbox.publish('a', '{"n":2}')`)
	three := publish(t, db, "a", "", `{"n":3}`)[0]

	r := invoke(t, fn)
	if r.Position != one || r.Sent != 1 {
		t.Errorf("with a writer open at %d: position %d sent %d, want %d and 1", held, r.Position, r.Sent, one)
	}
	if err := wtx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r = invoke(t, fn)
	if r.Position != three || r.Sent != 2 {
		t.Errorf("after the commit: position %d sent %d, want %d and 2", r.Position, r.Sent, three)
	}
	exactlyOnceInOrder(t, drain(t, q, url, 3, 10*time.Second), []int64{one, held, three}, byTopic)

	gap := db.BurnOne(t)
	five := publish(t, db, "a", "", `{"n":5}`)[0]
	r = invoke(t, fn)
	if r.Position != three || r.Sent != 0 {
		t.Errorf("with a rolled-back gap at %d: position %d sent %d, want %d and 0", gap, r.Position, r.Sent, three)
	}
	fill := lambdatest.Start(t, lambdatest.Build(t, "fill"), map[string]string{
		"DATABASE_URL": db.URL, "FILL_GRACE": "0s", "FILL_WATCH": "false", "FILL_PASS_BUDGET": "10s", "FILL_TICK": "50ms",
	})
	if out, err := fill.Invoke(ctx, schedule); err != nil {
		t.Fatalf("fill: %v %s", err, out)
	}
	if by := testdb.Scalar[*string](t, db.Pool, `SELECT filled_by FROM outbox.events WHERE sequence = $1`, gap); by == nil {
		t.Fatalf("the fill did not close the gap at %d", gap)
	}
	r = invoke(t, fn)
	if r.Position != five || r.Sent != 1 || r.Skipped != 1 {
		t.Errorf("after the fill: position %d sent %d skipped %d, want %d, 1 and the placeholder", r.Position, r.Sent, r.Skipped, five)
	}
	exactlyOnceInOrder(t, drain(t, q, url, 1, 10*time.Second), []int64{five}, byTopic)
}

// Prune never deletes what the relay has not sent: the relay registers its
// position before its first send, so even a relay whose target is down
// keeps every event, and one behind keeps the rest.
func TestPruneNeverDeletesWhatTheRelayHasNotSent(t *testing.T) {
	db, q := testdb.New(t), sqstest.Client(t)
	url := sqstest.NewQueue(t, q, "relay-prune", nil)
	ctx := context.Background()
	early := publish(t, db, "a", "", payloads(3)...)
	// The relay's first pass, its target unreachable: nothing sent.
	down := invoke(t, relayFn(t, db, map[string]string{"RELAY_TARGET": url, "AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:1", "RELAY_PASS_BUDGET": "1s"}))
	if down.Sent != 0 || down.WaitingFor() != "target" {
		t.Fatalf("with the target down: sent %d waiting %q, want 0 and target", down.Sent, down.WaitingFor())
	}
	fill := lambdatest.Start(t, lambdatest.Build(t, "fill"), map[string]string{
		"DATABASE_URL": db.URL, "FILL_GRACE": "0s", "FILL_WATCH": "false", "FILL_PASS_BUDGET": "10s", "FILL_TICK": "50ms",
	})
	prune := lambdatest.Start(t, lambdatest.Build(t, "prune"), map[string]string{
		"DATABASE_URL": db.URL, "PRUNE_EVENTS_AFTER": "1s",
	})
	pruneAll := func() {
		t.Helper()
		if out, err := fill.Invoke(ctx, schedule); err != nil {
			t.Fatalf("fill: %v %s", err, out)
		}
		db.Exec(t, `UPDATE outbox.events SET recorded_at = now() - interval '1 hour'`)
		if out, err := prune.Invoke(ctx, schedule); err != nil {
			t.Fatalf("prune: %v %s", err, out)
		}
	}
	pruneAll()
	if n := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.events`); n != 3 {
		t.Errorf("%d events left after prune, want all 3 (the relay sent none)", n)
	}

	fn := relayFn(t, db, map[string]string{"RELAY_TARGET": url})
	invoke(t, fn)
	late := publish(t, db, "a", "", payloads(3)...)
	pruneAll()
	if got := testdb.Column[int64](t, db.Pool, `SELECT sequence FROM outbox.events ORDER BY sequence`); fmt.Sprint(got) != fmt.Sprint(late) {
		t.Errorf("events left after prune %v, want the unsent %v", got, late)
	}
	invoke(t, fn)
	exactlyOnceInOrder(t, sortedBySequence(drain(t, q, url, 6, 10*time.Second)), append(early, late...), byTopic)
}

// Two invocations overlap as the schedule makes them: the second registers
// as successor, the first hands the lease over between batches, and the
// stream loses and repeats nothing.
func TestHandOverBetweenTwoInvocationsLosesAndRepeatsNothing(t *testing.T) {
	t.Parallel()
	db, q := testdb.New(t), sqstest.Client(t)
	url := sqstest.NewQueue(t, q, "relay-handover", nil)
	env := map[string]string{"RELAY_TARGET": url, "RELAY_WATCH": "true", "RELAY_PASS_BUDGET": "4s", "RELAY_TICK": "100ms"}
	first, second := relayFn(t, db, env), relayFn(t, db, env)

	var seqs []int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			seqs = append(seqs, publish(t, db, fmt.Sprintf("t%d", i%3), "", fmt.Sprintf(`{"i":%d}`, i))...)
		}
	}()
	results := make([]response, 2)
	var runs sync.WaitGroup
	for i, fn := range []*lambdatest.Function{first, second} {
		runs.Add(1)
		go func() {
			defer runs.Done()
			results[i] = invoke(t, fn)
		}()
		time.Sleep(2 * time.Second)
	}
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	runs.Wait()

	// Whatever was published after the second pass's budget ended.
	c := invoke(t, relayFn(t, db, map[string]string{"RELAY_TARGET": url}))

	a, b := results[0], results[1]
	if !a.HandedOver {
		t.Errorf("the first pass did not hand over: %+v", a)
	}
	if b.LeaseWaitMS == 0 {
		t.Errorf("the second pass never waited as successor: %+v", b)
	}
	if c.Position != seqs[len(seqs)-1] {
		t.Errorf("the stream ended at %d, want the last event %d", c.Position, seqs[len(seqs)-1])
	}
	if a.Sent+b.Sent+c.Sent != int64(len(seqs)) {
		t.Errorf("sent %d + %d + %d, want %d: nothing twice", a.Sent, b.Sent, c.Sent, len(seqs))
	}
	exactlyOnceInOrder(t, sortedBySequence(drain(t, q, url, len(seqs), 15*time.Second)), seqs, byTopic)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A parked event was never sent: prune keeps it (and what follows it)
// until it is re-sent, and names it as what bounded the pass.
func TestPruneKeepsAParkedEventUntilItIsResent(t *testing.T) {
	db, q := testdb.New(t), sqstest.Client(t)
	url := sqstest.NewQueue(t, q, "relay-prune-parked", nil)
	ctx := context.Background()
	seqs := publish(t, db, "a", "", `{"n":1}`, badPayload, `{"n":3}`)
	r := invoke(t, relayFn(t, db, map[string]string{"RELAY_TARGET": url, "RELAY_MAX_ATTEMPTS": "1"}))
	if r.Parked != 1 || r.Position != seqs[2] {
		t.Fatalf("parked %d position %d, want 1 and %d", r.Parked, r.Position, seqs[2])
	}
	fill := lambdatest.Start(t, lambdatest.Build(t, "fill"), map[string]string{
		"DATABASE_URL": db.URL, "FILL_GRACE": "0s", "FILL_WATCH": "false", "FILL_PASS_BUDGET": "10s", "FILL_TICK": "50ms",
	})
	if out, err := fill.Invoke(ctx, schedule); err != nil {
		t.Fatalf("fill: %v %s", err, out)
	}
	db.Exec(t, `UPDATE outbox.events SET recorded_at = now() - interval '1 hour'`)
	prune := lambdatest.Start(t, lambdatest.Build(t, "prune"), map[string]string{"DATABASE_URL": db.URL, "PRUNE_EVENTS_AFTER": "1s"})
	out, err := prune.Invoke(ctx, schedule)
	if err != nil {
		t.Fatalf("prune: %v %s", err, out)
	}
	if !strings.Contains(string(out), `"kept_for_consumer":"relay:default (parked)"`) {
		t.Errorf("prune's answer does not name the parked event as its bound: %s", out)
	}
	if got := testdb.Column[int64](t, db.Pool, `SELECT sequence FROM outbox.events ORDER BY sequence`); fmt.Sprint(got) != fmt.Sprint(seqs[1:]) {
		t.Errorf("events left %v, want %v: the parked one and after", got, seqs[1:])
	}
	// Re-sent (as the relay marks it), it no longer holds retention.
	db.Exec(t, `UPDATE outbox.relay_parked SET resend_requested_at = now(), resent_at = now()`)
	if out, err := prune.Invoke(ctx, schedule); err != nil {
		t.Fatalf("prune: %v %s", err, out)
	}
	if n := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.events`); n != 0 {
		t.Errorf("%d events left once the parked one was re-sent, want 0", n)
	}
}
