package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
)

func filledBy(t *testing.T, db *testdb.DB, seq int64) string {
	t.Helper()
	return testdb.Scalar[string](t, db.Pool, `SELECT coalesce((SELECT coalesce(filled_by, 'event') FROM outbox.events WHERE sequence = $1), 'missing')`, seq)
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
	db := healthyDB(t)
	ctx := context.Background()

	idle := db.Connect(t)
	testdb.Exec(t, idle, `SET application_name = 'nightly-report'`)
	pid := testdb.Scalar[int32](t, idle, `SELECT pg_backend_pid()`)
	hold, err := idle.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx) //nolint:errcheck
	testdb.Exec(t, hold, `SELECT pg_current_xact_id()`)
	gap := db.BurnOne(t)
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
		t.Run(strings.Join(bad, " "), func(t *testing.T) {
			code, out, errs := cli(t, vars, bad...)
			wantCode(t, strings.Join(bad, " "), code, exitUsage, out, errs)
		})
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
