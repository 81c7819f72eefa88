package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// The operator's commands against the real local stack: PostgreSQL (a
// fresh database per test, the functions' passes run for real) and the
// fauxqs SQS emulator.

func quiet() *slog.Logger { return slog.New(slog.NewJSONHandler(io.Discard, nil)) }

func mustExec(t *testing.T, db *testdb.DB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// fillPass runs one bounded fill pass, as a scheduled invocation would
// (no grace: the tests make their stalls on purpose).
func fillPass(t *testing.T, db *testdb.DB) *fill.Result {
	t.Helper()
	s, err := fill.New(db.Pool, fill.Config{Grace: pass.Off, Bounded: true, PassBudget: 700 * time.Millisecond, Tick: 50 * time.Millisecond},
		fill.Options{Options: pass.Options{Logger: quiet(), Metrics: &metrics.Emitter{Function: "fill", Out: io.Discard}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.RunOnce(context.Background(), nil)
	if err != nil {
		t.Fatalf("fill pass: %v", err)
	}
	return res
}

// sweepPass runs one sweep pass, so sweep_state says it runs.
func sweepPass(t *testing.T, db *testdb.DB) {
	t.Helper()
	s, err := sweep.New(db.Pool, sweep.Config{}, sweep.Options{Options: pass.Options{Logger: quiet(), Metrics: &metrics.Emitter{Function: "sweep", Out: io.Discard}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunOnce(context.Background(), nil); err != nil {
		t.Fatalf("sweep pass: %v", err)
	}
}

func burnOne(t *testing.T, db *testdb.DB) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var s int64
	if err := tx.QueryRow(ctx, `SELECT outbox.publish('t', '{}')`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

func publish(t *testing.T, db *testdb.DB) int64 {
	t.Helper()
	var s int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT outbox.publish('t', '{}')`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func filledBy(t *testing.T, db *testdb.DB, seq int64) string {
	t.Helper()
	var by *string
	err := db.Pool.QueryRow(context.Background(), `SELECT filled_by FROM outbox.events WHERE sequence = $1`, seq).Scan(&by)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "missing"
	case err != nil:
		t.Fatal(err)
	case by == nil:
		return "event"
	}
	return *by
}

func wantCode(t *testing.T, what string, got, want int, out, errs string) {
	t.Helper()
	if got != want {
		t.Errorf("%s exits %d, want %d\nstdout:\n%s\nstderr:\n%s", what, got, want, out, errs)
	}
}

func wantIn(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s does not say %q:\n%s", what, w, text)
		}
	}
}

// statusJSON runs status --json and decodes it.
func statusJSON(t *testing.T, vars map[string]string, args ...string) (int, statusReport) {
	t.Helper()
	code, out, errs := cli(t, vars, append([]string{"status", "--json"}, args...)...)
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("status --json exits %d with no JSON: %v\n%s%s", code, err, out, errs)
	}
	return code, r
}

func findingNames(r statusReport) []string {
	var names []string
	for _, f := range r.Attention {
		names = append(names, f.Name)
	}
	return names
}

// A healthy outbox: fill caught up, the sweep running, nothing dead:
// exit 0, fit for a health check; the password is never printed.
func TestStatusOfAHealthyOutboxExitsZero(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	publish(t, db)
	fillPass(t, db)
	sweepPass(t, db)
	vars := map[string]string{"DATABASE_URL": withPassword(t, db.URL)}

	code, out, errs := cli(t, vars, "status")
	wantCode(t, "status", code, exitOK, out, errs)
	wantIn(t, "status", out, "watermark 1   head 1   lag 0", "caught up", "OK: nothing needs a person")
	if strings.Contains(out+errs, password) {
		t.Errorf("status prints the password:\n%s", out)
	}
	code, r := statusJSON(t, vars)
	if code != exitOK {
		t.Errorf("status --json exits %d, want 0", code)
	}
	if len(r.Attention) != 0 {
		t.Errorf("attention = %+v, want none", r.Attention)
	}
	if r.Fill.Watermark != 1 {
		t.Errorf("fill.watermark = %d, want 1", r.Fill.Watermark)
	}
}

// Silence is a finding: a fill that stopped writing its state, a sweep
// that never ran. And a dead delivery is one.
func TestStatusNamesSilenceAndDeadDeliveries(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	publish(t, db)
	fillPass(t, db)
	vars := map[string]string{"DATABASE_URL": db.URL}

	code, r := statusJSON(t, vars)
	if code != exitAttention {
		t.Errorf("status with a sweep that never ran exits %d, want %d", code, exitAttention)
	}
	if got := findingNames(r); len(got) != 1 || got[0] != "sweep-silent" {
		t.Errorf("findings = %v, want [sweep-silent]", got)
	}

	sweepPass(t, db)
	mustExec(t, db, `UPDATE outbox.fill_state SET updated_at = now() - interval '6 minutes'`)
	mustExec(t, db, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, redeliveries, delivered_at, dead_at)
		VALUES ('billing', 'invoice', '', 'dead', 11, 10, now() - interval '1 hour', now())`)
	code, out, errs := cli(t, vars, "status")
	wantCode(t, "status", code, exitAttention, out, errs)
	wantIn(t, "status", out, "NEEDS ATTENTION", "fill-silent", "no fill pass has written its state for 6m", "dead", "1 dead delivery", "dead 1 ")

	if code, r := statusJSON(t, vars, "--silent-after", "10m"); code != exitAttention || len(r.Attention) != 1 || r.Attention[0].Name != "dead" {
		t.Errorf("status --silent-after 10m exits %d with %v, want only dead", code, findingNames(r))
	}
}

// An old open delivery means the relay is down.
func TestStatusNamesAnOldOpenDelivery(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	publish(t, db)
	fillPass(t, db)
	sweepPass(t, db)
	mustExec(t, db, `INSERT INTO outbox.deliveries (recipient, kind, payload, created_at) VALUES ('billing', 'invoice', '', now() - interval '20 minutes')`)
	code, r := statusJSON(t, map[string]string{"DATABASE_URL": db.URL})
	if code != exitAttention {
		t.Errorf("status exits %d, want %d", code, exitAttention)
	}
	if got := findingNames(r); len(got) != 1 || got[0] != "relay" {
		t.Errorf("findings = %v, want [relay]", got)
	}
	if r.Deliveries.Pending != 1 {
		t.Errorf("deliveries.pending = %d, want 1", r.Deliveries.Pending)
	}
}

// The escape hatch, end to end: a gap whose proof a session left idle in
// transaction blocks; status names that session and exits 3; skip-stall
// shows it and refuses without --yes, writes the operator placeholder and
// the record with it; the fill's next pass moves on and counts it; status
// is healthy again. As the operator role, whose login has a password that
// is never printed.
//
// Not parallel: the idle session holds an xid, and with it the proof of
// every fill pass in the cluster.
func TestSkipStallPastABlockedProof(t *testing.T) {
	db := testdb.New(t)
	ctx := context.Background()
	publish(t, db)
	fillPass(t, db)
	sweepPass(t, db)

	idle := db.Connect(t)
	if _, err := idle.Exec(ctx, `SET application_name = 'nightly-report'`); err != nil {
		t.Fatal(err)
	}
	var pid int32
	if err := idle.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	hold, err := idle.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx) //nolint:errcheck
	if _, err := hold.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	gap := burnOne(t, db)
	top := publish(t, db)
	if res := fillPass(t, db); res.WaitingFor() != fill.WaitingProof {
		t.Fatalf("the fill pass waits for %q, want proof: %v", res.WaitingFor(), res)
	}

	op := db.Operator(t)
	vars := map[string]string{"DATABASE_URL": op.URL, "USER": "alice"}
	noPassword := func(what, s string) {
		t.Helper()
		if strings.Contains(s, op.Password) {
			t.Errorf("%s prints the password:\n%s", what, s)
		}
	}

	code, out, errs := cli(t, vars, "status", "--stalled-after", "0s")
	noPassword("status", out+errs)
	t.Logf("outboxkeeper status --stalled-after 0s, during the blocked proof (exit %d):\n%s", code, out)
	wantCode(t, "status", code, exitAttention, out, errs)
	// Another role's session: its pid, user, application and xid age are
	// visible to every role, its state and query need pg_read_all_stats.
	wantIn(t, "status", out, fmt.Sprintf("stalled at %d", gap), "BLOCKED BY", fmt.Sprint(pid), "nightly-report", "proof-blocked")
	_, owner, _ := cli(t, map[string]string{"DATABASE_URL": db.URL}, "status")
	wantIn(t, "status as the owner", owner, "idle in transaction")
	_, r := statusJSON(t, vars, "--stalled-after", "0s")
	if len(r.BlockedBy) != 1 || r.BlockedBy[0].PID != pid {
		t.Errorf("blocked_by = %+v, want the idle session %d", r.BlockedBy, pid)
	}
	if r.Fill.Waiting != fill.WaitingProof {
		t.Errorf("fill.waiting = %q, want proof", r.Fill.Waiting)
	}

	to := fmt.Sprint(top)
	code, out, errs = cli(t, vars, "skip-stall", "--to", to, "--reason", "INC-9: nightly report idle in transaction")
	noPassword("skip-stall", out+errs)
	wantCode(t, "skip-stall without --yes", code, exitUsage, out, errs)
	wantIn(t, "skip-stall without --yes", out, fmt.Sprintf("skip (%d, %d]", gap-1, top), fmt.Sprint(pid), "duplicate key")
	wantIn(t, "skip-stall without --yes", errs, "refused", "--yes")
	if got := filledBy(t, db, gap); got != "missing" {
		t.Fatalf("sequence %d is %s after a refused skip, want missing", gap, got)
	}

	for _, bad := range [][]string{
		{"skip-stall", "--reason", "x", "--yes"},
		{"skip-stall", "--to", to, "--yes"},
		{"skip-stall", "--to", to, "--reason", "   ", "--yes"},
		{"skip-stall", "--to", "soon", "--reason", "x", "--yes"},
		{"skip-stall", "--to", fmt.Sprint(top + 1), "--reason", "x", "--yes"},
		{"skip-stall", "--to", fmt.Sprint(gap - 1), "--reason", "x", "--yes"},
	} {
		code, out, errs := cli(t, vars, bad...)
		wantCode(t, strings.Join(bad, " "), code, exitUsage, out, errs)
	}
	if got := filledBy(t, db, gap); got != "missing" {
		t.Fatalf("sequence %d is %s after the bad command lines, want missing", gap, got)
	}

	maint := db.Maintainer(t)
	code, out, errs = cli(t, map[string]string{"DATABASE_URL": maint.URL, "USER": "bob"}, "skip-stall", "--to", to, "--reason", "x", "--yes")
	wantCode(t, "skip-stall as the functions' role", code, exitError, out, errs)
	wantIn(t, "skip-stall as the functions' role", errs, "permission denied", "grant_operator")

	code, out, errs = cli(t, vars, "skip-stall", "--to", to, "--reason", "INC-9: nightly report idle in transaction", "--yes")
	noPassword("skip-stall --yes", out+errs)
	t.Logf("outboxkeeper skip-stall --to %s --reason ... --yes (exit %d):\n%s", to, code, out)
	wantCode(t, "skip-stall --yes", code, exitOK, out, errs)
	wantIn(t, "skip-stall --yes", out, fmt.Sprintf("skipped (%d, %d]: 1 operator placeholder written", gap-1, top), "alice@", "as "+op.Name)
	if got := filledBy(t, db, gap); got != "operator" {
		t.Errorf("sequence %d is %s, want an operator placeholder", gap, got)
	}
	if got := filledBy(t, db, top); got != "event" {
		t.Errorf("sequence %d is %s, want the committed event untouched", top, got)
	}
	var who, why string
	if err := db.Pool.QueryRow(ctx, `SELECT operator, reason FROM outbox.stall_skips`).Scan(&who, &why); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(who, "alice@") || why != "INC-9: nightly report idle in transaction" {
		t.Errorf("the record says %q, %q", who, why)
	}

	res := fillPass(t, db)
	if res.Watermark != top {
		t.Errorf("the next fill pass: Watermark = %d, want %d", res.Watermark, top)
	}
	if res.OperatorFilled != 1 {
		t.Errorf("the next fill pass: OperatorFilled = %d, want 1", res.OperatorFilled)
	}
	code, out, errs = cli(t, vars, "status")
	t.Logf("outboxkeeper status, after skip-stall and the next fill pass (exit %d):\n%s", code, out)
	wantCode(t, "status after the skip", code, exitOK, out, errs)
	wantIn(t, "status after the skip", out, "caught up", "SKIPS", "INC-9")
}

// dead list shows dead rows only, newest first, never a payload; dead
// retry is one compare-and-set: a row revived meanwhile is left alone and
// named, a retried row is pending with its redeliveries back at 0.
func TestDeadListAndRetry(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	op := db.Operator(t)
	vars := map[string]string{"DATABASE_URL": op.URL}
	insertDead := func(recipient string, deadFor time.Duration) int64 {
		t.Helper()
		var id int64
		if err := db.Pool.QueryRow(ctx, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, redeliveries, delivered_at, dead_at)
			VALUES ($1, 'invoice', 'secret-payload', 'dead', 11, 10, now() - $2::interval - interval '1 minute', now() - $2::interval) RETURNING id`,
			recipient, fmt.Sprintf("%d seconds", int(deadFor.Seconds()))).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	old := insertDead("ledger", 2*time.Hour)
	revived := insertDead("billing", 10*time.Minute)
	fresh := insertDead("billing", 0)
	mustExec(t, db, `INSERT INTO outbox.deliveries (recipient, kind, payload) VALUES ('billing', 'invoice', '')`)

	code, out, errs := cli(t, vars, "dead", "list")
	wantCode(t, "dead list", code, exitOK, out, errs)
	wantIn(t, "dead list", out, "ledger", "billing", "REDELIVERIES")
	if strings.Contains(out, "secret-payload") {
		t.Errorf("dead list prints a payload:\n%s", out)
	}
	code, out, _ = cli(t, vars, "dead", "list", "--json")
	var listed []struct{ ID int64 }
	if err := json.Unmarshal([]byte(out), &listed); err != nil || code != exitOK {
		t.Fatalf("dead list --json exits %d: %v\n%s", code, err, out)
	}
	if len(listed) != 3 || listed[0].ID != fresh || listed[2].ID != old {
		t.Errorf("dead list --json = %v, want %d, %d, %d (newest first)", listed, fresh, revived, old)
	}
	code, out, _ = cli(t, vars, "dead", "list", "--older-than", "1h", "--json")
	if err := json.Unmarshal([]byte(out), &listed); err != nil || len(listed) != 1 || listed[0].ID != old {
		t.Errorf("dead list --older-than 1h exits %d with %s, want only %d", code, out, old)
	}

	// Between the list and the retry, someone put `revived` back and the
	// relay pushed it again.
	mustExec(t, db, `UPDATE outbox.deliveries SET state = 'pending', redeliveries = 0, dead_at = NULL, delivered_at = NULL WHERE id = $1`, revived)
	ob, err := outbox.New(db.Pool, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.MarkDelivered(ctx, nil, revived); err != nil {
		t.Fatal(err)
	}

	code, out, errs = cli(t, vars, "dead", "retry", "--id", fmt.Sprintf("%d,%d", revived, fresh), "--id", "999999")
	wantCode(t, "dead retry with a revived row", code, exitAttention, out, errs)
	wantIn(t, "dead retry", out, "reset 1 of 3", fmt.Sprintf("%d: not dead (it is delivered): left alone", revived), "999999: no such delivery")
	type state struct {
		State        string
		Redeliveries int
		Attempts     int
		DeadAt       *time.Time
		DeliveredAt  *time.Time
	}
	read := func(id int64) state {
		t.Helper()
		var s state
		if err := db.Pool.QueryRow(ctx, `SELECT state, redeliveries, attempts, dead_at, delivered_at FROM outbox.deliveries WHERE id = $1`, id).
			Scan(&s.State, &s.Redeliveries, &s.Attempts, &s.DeadAt, &s.DeliveredAt); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := read(fresh); s.State != "pending" || s.Redeliveries != 0 || s.DeadAt != nil || s.DeliveredAt != nil || s.Attempts != 11 {
		t.Errorf("the retried row is %+v, want pending, 0 redeliveries, no dead_at or delivered_at, attempts kept", s)
	}
	if s := read(revived); s.State != "delivered" || s.Attempts != 12 {
		t.Errorf("the revived row is %+v, want it left delivered by the relay", s)
	}
	if s := read(old); s.State != "dead" {
		t.Errorf("the row not asked for is %s, want dead", s.State)
	}

	code, out, errs = cli(t, vars, "dead", "retry", "--all", "--older-than", "1h")
	wantCode(t, "dead retry --all --older-than 1h", code, exitOK, out, errs)
	wantIn(t, "dead retry --all", out, "reset 1 dead delivery to pending")
	if s := read(old); s.State != "pending" || s.Redeliveries != 0 {
		t.Errorf("the old dead row is %+v after --all, want pending with 0 redeliveries", s)
	}

	for _, bad := range [][]string{
		{"dead", "retry"},
		{"dead", "retry", "--all", "--id", "1"},
		{"dead", "retry", "--id", "1", "--older-than", "1h"},
		{"dead", "retry", "--id", "x"},
		{"dead", "retry", "--id", "0"},
		{"dead", "retry", "--all", "--limit", "0"},
		{"dead", "list", "--limit", "0"},
		{"dead", "list", "extra"},
	} {
		code, out, errs := cli(t, vars, bad...)
		wantCode(t, strings.Join(bad, " "), code, exitUsage, out, errs)
	}
}

// dlq list shows each message with compensate's error attribute and the
// parser's verdict, and leaves every one in place; redrive sends the valid
// report back to the report queue and leaves bad input in the DLQ, its
// attribute intact.
func TestDLQListAndRedrive(t *testing.T) {
	t.Parallel()
	c := sqstest.Client(t)
	ctx := context.Background()
	queue := sqstest.NewQueue(t, c, "ok-reports", nil)
	dlq := sqstest.NewQueue(t, c, "ok-reports-dlq", nil)
	send := func(body, errAttr string) {
		t.Helper()
		in := &sqs.SendMessageInput{QueueUrl: aws.String(dlq), MessageBody: aws.String(body)}
		if errAttr != "" {
			in.MessageAttributes = map[string]sqstypes.MessageAttributeValue{"error": {DataType: aws.String("String"), StringValue: aws.String(errAttr)}}
		}
		if _, err := c.SendMessage(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	const valid = `{"v":1,"xid":"7305","sequences":[1201,1202]}`
	send(valid, "")
	send(`{"v":1,"sequences":[]}`, "")
	send(`{"v":1,"sequences":[99999]}`, "sequence 99999 is above the allocation head 12")
	vars := map[string]string{"ROLLBACK_QUEUE_URL": queue, "ROLLBACK_DLQ_URL": dlq}

	code, out, errs := cli(t, vars, "dlq", "list")
	wantCode(t, "dlq list", code, exitOK, out, errs)
	wantIn(t, "dlq list", out, "redrive", "invalid", "empty sequences", "rejected", "above the allocation head 12",
		"SQS has no peek", "receive count went up by one")
	code, out, _ = cli(t, vars, "dlq", "list", "--json")
	var listed []dlqMessage
	if err := json.Unmarshal([]byte(out), &listed); err != nil || code != exitOK {
		t.Fatalf("dlq list --json exits %d: %v\n%s", code, err, out)
	}
	if len(listed) != 3 {
		t.Fatalf("dlq list --json lists %d messages, want 3 (list must leave them visible): %s", len(listed), out)
	}

	code, out, errs = cli(t, vars, "dlq", "redrive", "--dry-run")
	wantCode(t, "dlq redrive --dry-run", code, exitAttention, out, errs)
	wantIn(t, "dlq redrive --dry-run", out, "would send 1 report")
	if got := sqstest.Drain(t, c, queue, 1, 2*time.Second); len(got) != 0 {
		t.Errorf("--dry-run sent %d messages to the report queue, want none", len(got))
	}

	code, out, errs = cli(t, vars, "dlq", "redrive")
	wantCode(t, "dlq redrive with bad input left", code, exitAttention, out, errs)
	wantIn(t, "dlq redrive", out, "sent 1 report back", "left 2 bad messages")
	var bodies []string
	for _, m := range sqstest.Drain(t, c, queue, 1, 5*time.Second) {
		bodies = append(bodies, aws.ToString(m.Body))
	}
	if len(bodies) != 1 || bodies[0] != valid {
		t.Errorf("the report queue holds %q, want the valid report unchanged", bodies)
	}
	left := sqstest.Drain(t, c, dlq, 2, 5*time.Second)
	if len(left) != 2 {
		t.Fatalf("the DLQ holds %d messages after the redrive, want the 2 bad ones", len(left))
	}
	attrs := 0
	for _, m := range left {
		if aws.ToString(m.Body) == valid {
			t.Errorf("the valid report is still in the DLQ")
		}
		if a, ok := m.MessageAttributes["error"]; ok && strings.Contains(aws.ToString(a.StringValue), "above the allocation head") {
			attrs++
		}
	}
	if attrs != 1 {
		t.Errorf("%d messages left kept compensate's error attribute, want 1", attrs)
	}

	if code, out, errs := cli(t, map[string]string{"ROLLBACK_DLQ_URL": dlq}, "dlq", "redrive"); code != exitUsage {
		t.Errorf("redrive without the report queue exits %d, want %d\n%s%s", code, exitUsage, out, errs)
	}
	if code, out, errs := cli(t, map[string]string{}, "dlq", "list"); code != exitUsage || !strings.Contains(errs, dlqURLVar) {
		t.Errorf("dlq list without a DLQ exits %d with %q, want %d naming %s\n%s", code, errs, exitUsage, dlqURLVar, out)
	}
}

// Every help page teaches: what the command does and how to log in.
func TestOperatorHelpPagesTeach(t *testing.T) {
	for _, c := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"--help"}, []string{"status", "dead", "dlq", "skip-stall", "migrate"}},
		{[]string{"status", "--help"}, []string{"BLOCKED BY", "Exit status 3", "fill-silent", "proof-blocked", "health check", "ROLLBACK_DLQ_URL"}},
		{[]string{"dead", "--help"}, []string{"list", "retry", "SWEEP_MAX_REDELIVERIES"}},
		{[]string{"dead", "retry", "--help"}, []string{"redeliveries 0", "compare-and-set", "--older-than"}},
		{[]string{"dlq", "--help"}, []string{"error", "redrive", "idempotent"}},
		{[]string{"dlq", "list", "--help"}, []string{"no peek", "receive", "count by one"}},
		{[]string{"dlq", "redrive", "--help"}, []string{"--dry-run", "parser compensate uses"}},
		{[]string{"skip-stall", "--help"}, []string{"--yes", "stall_skips", "duplicate key", "grant_operator", "ON CONFLICT DO NOTHING"}},
	} {
		code, out, _ := cli(t, nil, c.args...)
		what := strings.Join(c.args, " ")
		if code != exitOK {
			t.Errorf("%s exits %d, want 0", what, code)
		}
		wantIn(t, what, out, append(c.wants, "DATABASE_URL", "DATABASE_SECRET_ARN")...)
	}
}

// prunePass runs one prune pass, so prune_state says it runs.
func prunePass(t *testing.T, db *testdb.DB) {
	t.Helper()
	s, err := prune.New(db.Pool, prune.Config{}, prune.Options{Options: pass.Options{Logger: quiet(), Metrics: &metrics.Emitter{Function: "prune", Out: io.Discard}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunOnce(context.Background(), nil); err != nil {
		t.Fatalf("prune pass: %v", err)
	}
}

// Before the first fill pass, fill_state is as the migration wrote it:
// that write is not a pass, so the fill is silent at once, and the lag is
// the head, since read_events stops at the first missing sequence.
func TestStatusBeforeTheFirstFillPass(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	gap := burnOne(t, db)
	top := publish(t, db)
	sweepPass(t, db)
	vars := map[string]string{"DATABASE_URL": db.URL}

	code, r := statusJSON(t, vars)
	if code != exitAttention {
		t.Errorf("status before the first fill pass exits %d, want %d", code, exitAttention)
	}
	if got := findingNames(r); !slices.Equal(got, []string{"fill-silent"}) {
		t.Errorf("findings = %v, want [fill-silent]", got)
	}
	if r.Fill.Lag != top {
		t.Errorf("fill.lag = %d, want %d: read_events is stuck at %d", r.Fill.Lag, top, gap)
	}
	if r.Fill.PassEverRan {
		t.Error("fill.pass_ever_ran = true: the migration's write was taken for a pass")
	}
	if r.Fill.LastWriteAt != nil {
		t.Errorf("fill.last_write_at = %v, want null (no pass wrote it)", r.Fill.LastWriteAt)
	}
	code, out, errs := cli(t, vars, "status")
	wantCode(t, "status", code, exitAttention, out, errs)
	wantIn(t, "status", out, fmt.Sprintf("lag %d", top), fmt.Sprintf("read_events stops at %d", gap),
		"no fill pass has run since the migrations", "never ran", "fill-silent")
	if strings.Contains(out, "last written") {
		t.Errorf("status says the fill state was written by a pass:\n%s", out)
	}

	fillPass(t, db)
	code, r = statusJSON(t, vars)
	if code != exitOK || !r.Fill.PassEverRan || r.Fill.Lag != 0 {
		t.Errorf("after a fill pass: exit %d, pass_ever_ran %v, lag %d; want 0, true, 0 (findings %v)", code, r.Fill.PassEverRan, r.Fill.Lag, findingNames(r))
	}
}

// The header names the schema once: "schema outbox on ...".
func TestStatusHeaderNamesTheSchemaOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	fillPass(t, db)
	_, out, _ := cli(t, map[string]string{"DATABASE_URL": db.URL}, "status")
	header, _, _ := strings.Cut(out, "\n")
	if !strings.HasPrefix(header, "schema outbox on postgres@") {
		t.Errorf("header %q, want it to start with \"schema outbox on postgres@\"", header)
	}
	if strings.Count(header, "outbox") != 1 {
		t.Errorf("header %q repeats the schema", header)
	}
}

// A prune that never ran is flagged once its deployment is older than
// --prune-silent-after (not before: it runs hourly).
func TestStatusFlagsAPruneThatNeverRan(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	publish(t, db)
	fillPass(t, db)
	sweepPass(t, db)
	vars := map[string]string{"DATABASE_URL": db.URL}
	if code, r := statusJSON(t, vars); code != exitOK {
		t.Errorf("status of a new deployment whose prune has not run yet exits %d with %v, want 0", code, findingNames(r))
	}
	mustExec(t, db, `UPDATE outbox.schema_migrations SET applied_at = applied_at - interval '3 hours' WHERE name = '0008_prune_state.sql'`)

	code, r := statusJSON(t, vars)
	if code != exitAttention {
		t.Errorf("status with a prune that never ran in 3h exits %d, want %d", code, exitAttention)
	}
	if got := findingNames(r); !slices.Equal(got, []string{"prune-silent"}) {
		t.Errorf("findings = %v, want [prune-silent]", got)
	}
	_, out, _ := cli(t, vars, "status")
	wantIn(t, "status", out, "prune-silent", "the prune has never recorded a pass")

	prunePass(t, db)
	if code, r := statusJSON(t, vars); code != exitOK {
		t.Errorf("status after a prune pass exits %d with %v, want 0", code, findingNames(r))
	}
}

// On a database without the outbox schema, status says the schema is
// missing and how to migrate, not the server's raw error.
func TestStatusOnAnUnmigratedDatabaseSaysHowToMigrate(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	mustExec(t, db, `CREATE SCHEMA empty_outbox`)
	for _, schema := range []string{"never_made", "empty_outbox"} {
		t.Run(schema, func(t *testing.T) {
			code, out, errs := cli(t, map[string]string{"DATABASE_URL": db.URL, "OUTBOX_SCHEMA": schema}, "status")
			wantCode(t, "status", code, exitError, out, errs)
			wantIn(t, "status", errs, "schema "+schema, "missing or incomplete", "version 0", "outboxkeeper migrate up", "migrate status")
		})
	}
}

// A usage error is one line that says what is wrong and where the help
// is; the help itself is not printed.
func TestUsageErrorsAreOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"sideways"},
		{"migrate", "sideways"},
		{"status", "--nope"},
		{"status", "extra"},
		{"status", "--timeout", "720h"},
		{"dead", "retry"},
		{"migrate", "print", "extra"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errs := cli(t, map[string]string{}, args...)
			wantCode(t, strings.Join(args, " "), code, exitUsage, out, errs)
			if n := strings.Count(errs, "\n"); n != 1 {
				t.Errorf("stderr has %d lines, want 1:\n%s", n, errs)
			}
			if !strings.Contains(errs, "--help") {
				t.Errorf("stderr %q does not point at --help", errs)
			}
			if strings.Contains(out+errs, "Usage:") {
				t.Errorf("the help was printed:\n%s%s", out, errs)
			}
		})
	}
}

// --timeout becomes the server's statement_timeout, which takes at most
// 24 days; the CLI bounds it and names the flag.
func TestTimeoutIsBounded(t *testing.T) {
	for _, args := range [][]string{
		{"status", "--timeout", "720h"},
		{"status", "--timeout", "0s"},
		{"skip-stall", "--timeout", "2h", "--to", "1", "--reason", "x"},
		{"dead", "list", "--timeout", "500ms"},
		{"migrate", "up", "--timeout", "61m"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errs := cli(t, map[string]string{}, args...)
			wantCode(t, strings.Join(args, " "), code, exitUsage, out, errs)
			wantIn(t, "stderr", errs, "-timeout", "between 1s and 1h")
		})
	}
}

// skip-stall records who skipped: with $USER unset it would record
// nobody in particular, so --operator is required then.
func TestSkipStallWithoutUserRequiresOperator(t *testing.T) {
	code, out, errs := cli(t, map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}, "skip-stall", "--to", "5", "--reason", "INC-1")
	wantCode(t, "skip-stall without $USER or --operator", code, exitUsage, out, errs)
	wantIn(t, "stderr", errs, "--operator", "$USER")
	if strings.Contains(out+errs, "unknown@") {
		t.Errorf("it still records unknown@host:\n%s%s", out, errs)
	}
}

// migrate up and migrate print speak JSON, as every command does.
func TestMigrateUpAndPrintSpeakJSON(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	vars := map[string]string{"DATABASE_URL": db.URL, "OUTBOX_SCHEMA": "json_outbox"}
	all, err := migrate.Load("json_outbox")
	if err != nil {
		t.Fatal(err)
	}
	latest := all[len(all)-1]

	code, out, errs := cli(t, vars, "migrate", "up", "--json")
	wantCode(t, "migrate up --json", code, exitOK, out, errs)
	var up struct {
		Schema  string `json:"schema"`
		Applied []struct {
			Name, Checksum string
		} `json:"applied"`
		AlreadyApplied int    `json:"already_applied"`
		Attempts       int    `json:"attempts"`
		Version        int    `json:"version"`
		Latest         string `json:"latest"`
	}
	if err := json.Unmarshal([]byte(out), &up); err != nil {
		t.Fatalf("migrate up --json is not JSON: %v\n%s", err, out)
	}
	if up.Schema != "json_outbox" || len(up.Applied) != len(all) || up.Applied[0].Checksum != all[0].Checksum ||
		up.Latest != latest.Name || up.Version != latest.Version() || up.Attempts != 1 {
		t.Errorf("migrate up --json = %+v", up)
	}
	code, out, _ = cli(t, vars, "migrate", "up", "--json")
	if err := json.Unmarshal([]byte(out), &up); err != nil || code != exitOK || len(up.Applied) != 0 || up.AlreadyApplied != len(all) {
		t.Errorf("migrate up --json again exits %d with %+v (%v), want nothing applied", code, up, err)
	}

	after := all[len(all)-2].Name
	code, out, errs = cli(t, map[string]string{}, "migrate", "print", "--json", "--after", after)
	wantCode(t, "migrate print --json", code, exitOK, out, errs)
	var printed struct {
		Schema, After, Latest, SQL string
		Migrations                 []struct {
			Name, Checksum string
		}
	}
	if err := json.Unmarshal([]byte(out), &printed); err != nil {
		t.Fatalf("migrate print --json is not JSON: %v\n%s", err, out)
	}
	if printed.Schema != "outbox" || printed.After != after || printed.Latest != latest.Name ||
		len(printed.Migrations) != 1 || printed.Migrations[0].Name != latest.Name || !strings.Contains(printed.SQL, "COMMIT;") {
		t.Errorf("migrate print --json = %+v", printed)
	}
}
