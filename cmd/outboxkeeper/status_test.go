package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

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
	db := healthyDB(t)
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
	db.Exec(t, `UPDATE outbox.fill_state SET updated_at = now() - interval '6 minutes'`)
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, redeliveries, delivered_at, dead_at)
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
	db := healthyDB(t)
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload, created_at) VALUES ('billing', 'invoice', '', now() - interval '20 minutes')`)
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

// Before the first fill pass, fill_state is as the migration wrote it:
// that write is not a pass, so the fill is silent at once, and the lag is
// the head, since read_events stops at the first missing sequence.
func TestStatusBeforeTheFirstFillPass(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	gap := db.BurnOne(t)
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
	db := healthyDB(t)
	vars := map[string]string{"DATABASE_URL": db.URL}
	if code, r := statusJSON(t, vars); code != exitOK {
		t.Errorf("status of a new deployment whose prune has not run yet exits %d with %v, want 0", code, findingNames(r))
	}
	db.Exec(t, `UPDATE outbox.schema_migrations SET applied_at = applied_at - interval '3 hours' WHERE name = '0008_prune_state.sql'`)

	code, r := statusJSON(t, vars)
	if code != exitAttention {
		t.Errorf("status with a prune that never ran in 3h exits %d, want %d", code, exitAttention)
	}
	if got := findingNames(r); !slices.Equal(got, []string{"prune-silent"}) {
		t.Errorf("findings = %v, want [prune-silent]", got)
	}
	_, out, _ := cli(t, vars, "status")
	wantIn(t, "status", out, "prune-silent", "the prune has never recorded a pass")

	prunePass(t, db, 0)
	if code, r := statusJSON(t, vars); code != exitOK {
		t.Errorf("status after a prune pass exits %d with %v, want 0", code, findingNames(r))
	}
}

// On a database without the outbox schema, status says the schema is
// missing and how to migrate, not the server's raw error.
func TestStatusOnAnUnmigratedDatabaseSaysHowToMigrate(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	db.Exec(t, `CREATE SCHEMA empty_outbox`)
	for _, schema := range []string{"never_made", "empty_outbox"} {
		t.Run(schema, func(t *testing.T) {
			code, out, errs := cli(t, map[string]string{"DATABASE_URL": db.URL, "OUTBOX_SCHEMA": schema}, "status")
			wantCode(t, "status", code, exitError, out, errs)
			wantIn(t, "status", errs, "schema "+schema, "missing or incomplete", "version 0", "outboxkeeper migrate up", "migrate status")
		})
	}
}
