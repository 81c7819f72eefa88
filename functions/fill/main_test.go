package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testcluster"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// The real bootstrap under aws-lambda-rie fills a real gap when invoked as
// EventBridge invokes it, and answers the documented JSON. A bounded pass
// (FILL_WATCH=false), so each invocation ends when caught up.
func TestEndToEndUnderRIE(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := testenv.Context(t, 60*time.Second)

	bin := lambdatest.Build(t, "fill")
	fn := lambdatest.Start(t, bin, map[string]string{
		"DATABASE_URL":     db.URL,
		"FILL_GRACE":       "300ms",
		"FILL_PASS_BUDGET": "5s",
		"FILL_WATCH":       "false",
	})

	invoke := func(payload string) map[string]any {
		t.Helper()
		out, err := fn.Invoke(ctx, []byte(payload))
		if err != nil {
			t.Fatalf("invoke %s: %v\n%s\nlogs:\n%s", payload, err, out, fn.Logs())
		}
		t.Logf("invoke %.40s... -> %s", payload, out)
		return lambdatest.Response(t, out, "watermark", "head", "filled", "stalled_at", "waiting", "blocked_by", "cycles", "statements", "duration_ms")
	}

	// EventBridge Scheduler passes its Input verbatim; first run anchors.
	db.Exec(t, `SELECT outbox.publish('t', '{}')`)
	lambdatest.WantFields(t, "first run", invoke(`{"source":"outboxkeeper.schedule"}`), map[string]any{"watermark": 1.0, "waiting": nil})
	db.BurnOne(t) // a rolled-back writer between two publishes: a real gap at 2
	db.Exec(t, `SELECT outbox.publish('t', '{}')`)

	// A classic scheduled-event envelope.
	envelope := `{"version":"0","id":"53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa","detail-type":"Scheduled Event",
		"source":"aws.events","account":"123456789012","time":"2026-01-01T00:00:00Z","region":"us-east-1",
		"resources":["arn:aws:events:us-east-1:123456789012:rule/fill"],"detail":{}}`
	// The gap at 2 filled within the pass (grace waited out).
	res := invoke(envelope)
	lambdatest.WantFields(t, "scheduled event", res, map[string]any{"filled": 1.0, "watermark": 3.0, "head": 3.0, "waiting": nil, "stalled_at": nil})
	if bl, ok := res["blocked_by"].([]any); !ok || len(bl) != 0 {
		t.Errorf("blocked_by = %v, want an empty list", res["blocked_by"])
	}
	if n, _ := res["statements"].(float64); n < 1 {
		t.Errorf("statements = %v, want at least 1", res["statements"])
	}
	var filledBy string
	if err := db.Pool.QueryRow(ctx, `SELECT filled_by FROM outbox.events WHERE sequence = 2`).Scan(&filledBy); err != nil {
		t.Fatalf("sequence 2: %v", err)
	}
	if filledBy != "fill" {
		t.Errorf("sequence 2: filled_by %q, want fill", filledBy)
	}

	// `{}` too; caught up now.
	lambdatest.WantFields(t, "caught-up pass", invoke(`{}`), map[string]any{"filled": 0.0, "watermark": 3.0})

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
	passes, emf, withoutID := count(logs)
	if passes != 3 {
		t.Errorf("%d pass log lines, want 3\n%s", passes, logs)
	}
	if withoutID != 0 {
		t.Errorf("%d pass log lines without a requestId, want none\n%s", withoutID, logs)
	}
	if emf != 3 {
		t.Errorf("%d EMF lines, want 3\n%s", emf, logs)
	}
	if !strings.Contains(logs, `"PassDurationMs"`) {
		t.Error("no PassDurationMs metric")
	}
}

// pg_ctl stop -m immediate in the middle of a proof, and a restart: the
// invocation in flight retries through the outage and answers normally,
// and gives its lease back, so the next pass does not wait for it. On a
// cluster of the test's own, so the crash disturbs no other test.
func TestImmediateStopMidProofAnswersNormallyUnderRIE(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	db := testdb.NewOn(t, c.URL("postgres", c.Password, "postgres", "sslmode=disable"))
	ctx := testenv.Context(t, 90*time.Second)
	db.Exec(t, `SELECT outbox.publish('t', '{}')`)
	// A writer holds sequence 2 open, above the first run's 1 and below
	// its 3: the pass's proof waits on it. The crash ends it unwritten.
	writer := db.Connect(t)
	wtx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wtx.Exec(ctx, `SELECT outbox.publish('t', '{"held":true}')`); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `SELECT outbox.publish('t', '{}')`)

	fn := lambdatest.Start(t, lambdatest.Build(t, "fill"), map[string]string{
		"DATABASE_URL":     db.URL,
		"FILL_GRACE":       "0s",
		"FILL_PASS_BUDGET": "8s",
		"FILL_WATCH":       "false",
	})
	invoke := func() (map[string]any, error) {
		out, err := fn.Invoke(ctx, []byte(`{"source":"outboxkeeper.schedule"}`))
		if err != nil {
			return nil, fmt.Errorf("%w: %s", err, out)
		}
		var res map[string]any
		if err := json.Unmarshal(out, &res); err != nil {
			return nil, fmt.Errorf("response is not JSON: %s", out)
		}
		return res, nil
	}
	type answer struct {
		res map[string]any
		err error
	}
	first := make(chan answer, 1)
	go func() { res, err := invoke(); first <- answer{res, err} }()

	// Until the pass polls the proof: its marker is persisted.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var marked bool
		if err := db.Pool.QueryRow(ctx, `SELECT cycle_marker IS NOT NULL FROM outbox.fill_state`).Scan(&marked); err != nil {
			t.Fatal(err)
		}
		if marked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pass never took its marker\n%s", fn.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(600 * time.Millisecond) // a tick or so into the proof
	c.Crash(t)
	time.Sleep(700 * time.Millisecond) // down for more than a tick
	c.Restart(t)

	a := <-first
	if a.err != nil {
		t.Fatalf("the invocation in flight: %v\nlogs:\n%s", a.err, fn.Logs())
	}
	t.Logf("in flight across the crash: %v", a.res)
	if a.res["error"] != nil {
		t.Errorf("error = %v, want none", a.res["error"])
	}
	if n, _ := a.res["retries"].(float64); n < 1 {
		t.Errorf("retries = %v, want the outage retried", a.res["retries"])
	}
	// Crash recovery moves the sequence past the values it had logged
	// ahead (up to 32): allocated, never written, and filled like 2.
	var head float64
	if err := db.Pool.QueryRow(ctx, `SELECT outbox.allocation_head()`).Scan(&head); err != nil {
		t.Fatal(err)
	}
	lambdatest.WantFields(t, "in flight across the crash", a.res, map[string]any{"filled": head - 2, "watermark": head, "waiting": nil})
	var filledBy *string
	if err := db.Pool.QueryRow(ctx, `SELECT filled_by FROM outbox.events WHERE sequence = 2`).Scan(&filledBy); err != nil || filledBy == nil || *filledBy != "fill" {
		t.Errorf("sequence 2: filled_by %v (%v), want fill", show(filledBy), err)
	}
	var owner *string
	if err := db.Pool.QueryRow(ctx, `SELECT owner FROM outbox.leases WHERE name = 'fill'`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner != nil {
		t.Errorf("lease_owner = %q after the invocation, want it given back", *owner)
	}
	next, err := invoke()
	if err != nil {
		t.Fatalf("the next invocation: %v", err)
	}
	lambdatest.WantFields(t, "the next pass", next, map[string]any{"waiting": nil, "lease_wait_ms": 0.0, "watermark": head})
}

// A bad configuration fails the init, naming the variable.
func TestBadConfigFailsInit(t *testing.T) {
	t.Parallel()
	lambdatest.BadConfigFailsInit(t, "fill", "FILL_BATCH_LIMIT", "zero")
}

// A statement blocked on a lock another session holds ends the pass on
// its budget: with a 4 s Lambda timeout the invocation still answers, logs
// its line and emits its metrics, instead of "Task timed out".
// Not parallel: the locker's FOR UPDATE takes an xid, and an xid held
// anywhere in the cluster holds every other test's proof back (the
// hand-over test's gaps would wait seconds past their bound).
func TestBlockedStatementAnswersBeforeTheLambdaDeadline(t *testing.T) {
	db := testdb.New(t)
	ctx := testenv.Context(t, 30*time.Second)
	db.Exec(t, `SELECT outbox.publish('t', '{}')`)
	db.Hold(t, `SELECT * FROM outbox.fill_state FOR UPDATE`)

	res := lambdatest.BlockedAnswersBeforeDeadline(t, ctx, "fill", db.URL, []byte(`{"source":"outboxkeeper.schedule"}`), 4*time.Second, `"timed_out"`)
	if res["waiting"] != "budget" {
		t.Errorf("waiting = %v, want budget", res["waiting"])
	}
}

// Two consecutive scheduled invocations in two execution environments,
// with the default grace and tick: the second is handed the lease by the
// first, and gaps made across the hand-over are filled within grace +
// tick + 1 s.
func TestConsecutiveInvocationsHandOverUnderRIE(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := testenv.Context(t, 60*time.Second)
	db.Exec(t, `SELECT outbox.publish('t', '{}')`)
	env := map[string]string{"DATABASE_URL": db.URL, "FILL_PASS_BUDGET": "6s"}
	bin := lambdatest.Build(t, "fill")
	first, second := lambdatest.Start(t, bin, env), lambdatest.Start(t, bin, env)
	invoke := func(fn *lambdatest.Function) <-chan map[string]any {
		done := make(chan map[string]any, 1)
		go func() {
			out, err := fn.Invoke(ctx, []byte(`{"source":"outboxkeeper.schedule"}`))
			var res map[string]any
			if err != nil || json.Unmarshal(out, &res) != nil {
				res = map[string]any{"invoke_error": fmt.Sprint(err, string(out))}
			}
			done <- res
		}()
		return done
	}
	burn := func() (int64, time.Time) {
		t.Helper()
		seq := db.BurnOne(t)
		var at time.Time
		if err := db.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return seq, at
	}

	a := invoke(first)
	time.Sleep(2 * time.Second) // the first one watches a caught-up table
	gaps := map[int64]time.Time{}
	seq, at := burn()
	gaps[seq] = at
	b := invoke(second) // the schedule's next invocation
	for range 10 {      // gaps every 200 ms across the hand-over
		time.Sleep(200 * time.Millisecond)
		seq, at := burn()
		gaps[seq] = at
	}
	ra, rb := <-a, <-b
	if ra["handed_over"] != true {
		t.Errorf("first invocation: handed_over = %v, want true: %v", ra["handed_over"], ra)
	}
	if rb["invoke_error"] != nil {
		t.Errorf("second invocation: %v", rb["invoke_error"])
	}
	if rb["error"] != nil {
		t.Errorf("second invocation: error %v, want none; %v", rb["error"], rb)
	}
	bound := 2*time.Second + 500*time.Millisecond + time.Second // grace + tick + 1 s
	for seq, at := range gaps {
		var recorded time.Time
		var by *string
		if err := db.Pool.QueryRow(ctx, `SELECT recorded_at, filled_by FROM outbox.events WHERE sequence = $1`, seq).Scan(&recorded, &by); err != nil {
			t.Errorf("gap %d: %v", seq, err)
			continue
		}
		if by == nil || *by != "fill" {
			t.Errorf("gap %d: filled_by %v, want fill", seq, show(by))
		}
		if d := recorded.Sub(at); d > bound {
			t.Errorf("gap %d filled %s after its rollback, want within %s", seq, d, bound)
		}
	}
}

// show prints an optional value: nil, or what it points to.
func show[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}
