package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// twoConsumers is an outbox of 10 events, the first five recorded three
// hours ago, read by "billing" (caught up) and "search" (stopped at 2),
// with the prune run at a 1h retention: search holds retention back since
// about two hours, and the prune kept everything after 2 for it.
func twoConsumers(t *testing.T) (*testdb.DB, map[string]string) {
	t.Helper()
	db := testdb.New(t)
	for range 10 {
		publish(t, db)
	}
	db.Exec(t, `UPDATE outbox.events SET recorded_at = now() - interval '3 hours' WHERE sequence <= 5`)
	fillPass(t, db)
	sweepPass(t, db)
	db.Exec(t, `SELECT outbox.commit_position('billing', 10)`)
	db.Exec(t, `SELECT outbox.commit_position('search', 2)`)
	prunePass(t, db, time.Hour)
	op := db.Operator(t)
	return db, map[string]string{"DATABASE_URL": op.URL, "USER": "alice"}
}

func TestStatusShowsEachConsumerAndTheOneHoldingRetention(t *testing.T) {
	t.Parallel()
	_, vars := twoConsumers(t)
	code, out, errs := cli(t, vars, "status")
	t.Logf("outboxkeeper status (exit %d):\n%s", code, out)
	wantCode(t, "status", code, exitAttention, out, errs)
	wantIn(t, "status", out, "CONSUMERS", "billing", "search", "retention-held")
	if !strings.Contains(lineOf(out, "search "), "yes, for 2h00m") && !strings.Contains(lineOf(out, "search "), "yes, for 1h59m") {
		t.Errorf("search has held retention back for about two hours, status says:\n%s", lineOf(out, "search "))
	}
	if !strings.Contains(lineOf(out, "billing"), " no") {
		t.Errorf("billing is caught up and holds nothing, status says:\n%s", lineOf(out, "billing"))
	}

	code, r := statusJSON(t, vars)
	if code != exitAttention {
		t.Errorf("status --json exits %d, want 3", code)
	}
	if len(r.Consumers) != 2 {
		t.Fatalf("status --json shows %d consumers, want 2: %+v", len(r.Consumers), r.Consumers)
	}
	if s := r.Consumers[0]; s.Name != "search" || !s.HoldsRetention || s.Lag != 8 {
		t.Errorf("the slowest consumer = %+v, want search at lag 8 holding retention", s)
	}
	if b := r.Consumers[1]; b.Name != "billing" || b.HoldsRetention {
		t.Errorf("the second consumer = %+v, want billing not holding retention", b)
	}
}

// Below --held-after nobody is needed yet.
func TestStatusWaitsHeldAfterBeforeCallingAPerson(t *testing.T) {
	t.Parallel()
	_, vars := twoConsumers(t)
	code, r := statusJSON(t, vars, "--held-after", "3h")
	if code != exitOK {
		t.Errorf("status --held-after 3h exits %d, want 0: %+v", code, r.Attention)
	}
}

func TestConsumersRewindNeedsYesAndIsRecorded(t *testing.T) {
	t.Parallel()
	db, vars := twoConsumers(t)
	code, out, errs := cli(t, vars, "consumers", "rewind", "--consumer", "billing", "--to", "6", "--reason", "INC-7: replay")
	wantCode(t, "rewind without --yes", code, exitUsage, out, errs)
	wantIn(t, "rewind without --yes", out+errs, "rewind billing from 10 to 6", "--yes")
	if p := testdb.Scalar[int64](t, db.Pool, `SELECT position FROM outbox.consumers WHERE name = 'billing'`); p != 10 {
		t.Errorf("rewind without --yes moved billing to %d", p)
	}

	code, out, errs = cli(t, vars, "consumers", "rewind", "--consumer", "billing", "--to", "6", "--reason", "INC-7: replay", "--yes")
	wantCode(t, "rewind --yes", code, exitOK, out, errs)
	wantIn(t, "rewind --yes", out, "recorded as consumer_changes id 1", "alice")
	if p := testdb.Scalar[int64](t, db.Pool, `SELECT position FROM outbox.consumers WHERE name = 'billing'`); p != 6 {
		t.Errorf("billing stands at %d after the rewind, want 6", p)
	}
	rec := testdb.Scalar[string](t, db.Pool, `SELECT format('%s|%s|%s|%s|%s|%s', action, consumer, from_position, to_position, split_part(operator, '@', 1), reason) FROM outbox.consumer_changes`)
	if rec != "rewind|billing|10|6|alice|INC-7: replay" {
		t.Errorf("the record = %q", rec)
	}
	if u := testdb.Scalar[string](t, db.Pool, `SELECT db_user FROM outbox.consumer_changes`); u == "postgres" || u == "" {
		t.Errorf("the record's db_user = %q, want the operator's login", u)
	}

	code, out, errs = cli(t, vars, "status")
	t.Logf("outboxkeeper status after the rewind (exit %d):\n%s", code, out)
	wantIn(t, "status after the rewind", out, "CONSUMER CHANGES", "rewind", "INC-7: replay")
}

func TestConsumersRewindRefusesWhatItCannotReplay(t *testing.T) {
	t.Parallel()
	db, vars := twoConsumers(t)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"forward", []string{"--consumer", "search", "--to", "5"}, "a rewind goes back"},
		{"into what the prune deleted", []string{"--consumer", "billing", "--to", "1"}, "no longer kept"},
		{"within five minutes of the retention", []string{"--consumer", "billing", "--to", "4"}, "within five minutes"},
		{"an unknown consumer", []string{"--consumer", "nobody", "--to", "1"}, `no consumer named "nobody"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"consumers", "rewind", "--reason", "test", "--yes"}, c.args...)
			code, out, errs := cli(t, vars, args...)
			if code == exitOK {
				t.Errorf("rewind %s succeeded:\n%s", c.name, out)
			}
			wantIn(t, "rewind "+c.name, out+errs, c.want)
		})
	}
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.consumer_changes`); n != 0 {
		t.Errorf("refused rewinds left %d records", n)
	}
}

func TestConsumersRetireFreesRetentionAndIsRecorded(t *testing.T) {
	t.Parallel()
	db, vars := twoConsumers(t)
	code, out, errs := cli(t, vars, "consumers", "retire", "--consumer", "search", "--reason", "decommissioned")
	wantCode(t, "retire without --yes", code, exitUsage, out, errs)
	code, out, errs = cli(t, vars, "consumers", "retire", "--consumer", "search", "--reason", "decommissioned", "--yes")
	wantCode(t, "retire --yes", code, exitOK, out, errs)
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.consumers WHERE name = 'search'`); n != 0 {
		t.Errorf("search is still registered after retire")
	}
	rec := testdb.Scalar[string](t, db.Pool, `SELECT format('%s|%s|%s|%s', action, consumer, from_position, coalesce(to_position::text, 'null')) FROM outbox.consumer_changes`)
	if rec != "retire|search|2|null" {
		t.Errorf("the record = %q", rec)
	}
	if res := prunePass(t, db, time.Hour); res.DeletedEvents != 3 {
		t.Errorf("the prune after the retire deleted %d events, want 3 (3..5, past the retention)", res.DeletedEvents)
	}

	code, out, errs = cli(t, vars, "consumers", "list", "--json")
	wantCode(t, "consumers list", code, exitOK, out, errs)
	var got struct {
		Consumers []struct{ Name string }   `json:"consumers"`
		Changes   []struct{ Action string } `json:"changes"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("consumers list --json: %v\n%s", err, out)
	}
	if len(got.Consumers) != 1 || got.Consumers[0].Name != "billing" {
		t.Errorf("consumers list after the retire = %+v, want billing alone", got.Consumers)
	}
	if len(got.Changes) != 1 || got.Changes[0].Action != "retire" {
		t.Errorf("consumers list changes = %+v, want the retire", got.Changes)
	}
}

// The functions' login reads the consumers' status (the sweep's metric)
// and may neither rewind nor retire.
func TestTheMaintainerMayNotMoveAConsumer(t *testing.T) {
	t.Parallel()
	db, _ := twoConsumers(t)
	m := db.Maintainer(t)
	vars := map[string]string{"DATABASE_URL": m.URL, "USER": "robot"}
	for _, args := range [][]string{
		{"consumers", "rewind", "--consumer", "billing", "--to", "8", "--reason", "x", "--yes"},
		{"consumers", "retire", "--consumer", "search", "--reason", "x", "--yes"},
	} {
		code, out, errs := cli(t, vars, args...)
		wantCode(t, strings.Join(args[:2], " ")+" as the maintainer", code, exitError, out, errs)
		wantIn(t, strings.Join(args[:2], " ")+" as the maintainer", errs, "permission denied", "grant_operator")
	}
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.consumers`); n != 2 {
		t.Errorf("%d consumers after the maintainer's attempts, want 2", n)
	}
}

func lineOf(text, word string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			return l
		}
	}
	return ""
}

// A prune DELETE in flight on an event of the range makes the rewind wait
// for it, and once it committed the rewind refuses: the consumer would
// not find the event it was rewound to read again. Not parallel: the
// DELETE holds an xid, which holds every other test's fill proof back.
func TestConsumersRewindWaitsForAPruneInFlightAndRefuses(t *testing.T) {
	db, vars := twoConsumers(t)
	ctx := context.Background()
	prune, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer prune.Rollback(ctx) //nolint:errcheck
	testdb.Exec(t, prune, `DELETE FROM outbox.events WHERE sequence = 8`)

	type outcome struct {
		code      int
		out, errs string
	}
	done := make(chan outcome, 1)
	go func() {
		code, out, errs := cli(t, vars, "consumers", "rewind", "--consumer", "billing", "--to", "6", "--reason", "replay", "--yes")
		done <- outcome{code, out, errs}
	}()
	select {
	case o := <-done:
		t.Fatalf("the rewind did not wait for the DELETE in flight: exit %d\n%s%s", o.code, o.out, o.errs)
	case <-time.After(500 * time.Millisecond):
	}
	if err := prune.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.code == exitOK {
		t.Errorf("the rewind succeeded over a deleted event:\n%s", o.out)
	}
	wantIn(t, "the rewind after the DELETE", o.out+o.errs, "no longer kept")
	if p := testdb.Scalar[int64](t, db.Pool, `SELECT position FROM outbox.consumers WHERE name = 'billing'`); p != 10 {
		t.Errorf("billing moved to %d", p)
	}
}
