package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/relay/parked"
)

// relayOnCall is a schema with two relays, as their passes leave it: orders
// at 3 of 4 with a parked event (2) and one it still tries (4); billing
// caught up. The CLI logs in as an operator.
func relayOnCall(t *testing.T) (*testdb.DB, map[string]string) {
	t.Helper()
	db := testdb.New(t)
	for range 4 {
		publish(t, db)
	}
	db.Exec(t, `SELECT outbox.commit_position('relay:orders', 3), outbox.commit_position('relay:billing', 4)`)
	db.Exec(t, `INSERT INTO outbox.relay_parked (relay, sequence, topic, attempts, error, parked_at) VALUES
		('orders', 2, 't', 5, 'InvalidMessageContents: Invalid characters found', now()),
		('orders', 4, 't', 2, 'InvalidMessageContents: Invalid characters found', NULL)`)
	return db, map[string]string{"DATABASE_URL": db.Operator(t).URL}
}

// status shows each relay's position, lag and refused events, and asks for
// a person (exit 3) while one has parked or failing events.
func TestRelayStatusShowsEachRelayAndItsParkedEvents(t *testing.T) {
	t.Parallel()
	_, vars := relayOnCall(t)
	code, out, errs := cli(t, vars, "relay", "status")
	wantCode(t, "relay status", code, exitAttention, out, errs)
	wantIn(t, "relay status", out, "RELAY", "LAG", "PARKED", "FAILING", "billing", "orders",
		"relay orders has 1 parked event", "relay orders stands at 1 refused event it still tries")
	code, out, _ = cli(t, vars, "relay", "status", "--json")
	var got struct {
		Relays    []parked.Status
		Attention []string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != exitAttention {
		t.Fatalf("relay status --json exits %d: %v\n%s", code, err, out)
	}
	if len(got.Relays) != 2 || got.Relays[1].Relay != "orders" {
		t.Fatalf("relays %+v, want billing and orders", got.Relays)
	}
	o := got.Relays[1]
	if o.Lag == nil || *o.Lag != 1 || o.Parked != 1 || o.Failing != 1 {
		t.Errorf("orders: %+v, want lag 1, 1 parked, 1 failing", o)
	}
}

// list shows parked events (never a payload); --all the ones still tried.
func TestRelayParkedListShowsParkedEvents(t *testing.T) {
	t.Parallel()
	_, vars := relayOnCall(t)
	code, out, errs := cli(t, vars, "relay", "parked", "list")
	wantCode(t, "relay parked list", code, exitOK, out, errs)
	wantIn(t, "relay parked list", out, "SEQUENCE", "InvalidMessageContents", "parked")
	if strings.Contains(out, "failing") {
		t.Errorf("list without --all shows an event still tried:\n%s", out)
	}
	code, out, _ = cli(t, vars, "relay", "parked", "list", "--all", "--json")
	var rows []parked.Parked
	if err := json.Unmarshal([]byte(out), &rows); err != nil || code != exitOK {
		t.Fatalf("list --all --json exits %d: %v\n%s", code, err, out)
	}
	if len(rows) != 2 || rows[0].State() != "parked" || rows[1].State() != "failing" {
		t.Errorf("list --all %+v, want 2 parked then 4 failing", rows)
	}
}

// resend without --yes shows what it would mark and marks nothing; with
// --yes it marks the parked event, and names a sequence that is not one.
func TestRelayParkedResendNeedsYesAndMarksOnlyParkedEvents(t *testing.T) {
	t.Parallel()
	db, vars := relayOnCall(t)
	requested := func() int {
		return testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.relay_parked WHERE resend_requested_at IS NOT NULL`)
	}
	code, out, errs := cli(t, vars, "relay", "parked", "resend", "--all")
	wantCode(t, "resend without --yes", code, exitUsage, out, errs)
	wantIn(t, "resend without --yes", errs, "add --yes")
	if n := requested(); n != 0 {
		t.Fatalf("%d rows marked without --yes", n)
	}
	code, out, errs = cli(t, vars, "relay", "parked", "resend", "--relay", "orders", "--sequence", "2,4", "--yes")
	wantCode(t, "resend 2 and 4", code, exitAttention, out, errs)
	wantIn(t, "resend 2 and 4", out, "marked 1 parked event", "out of order", "4: not a parked event")
	if n := requested(); n != 1 {
		t.Errorf("%d rows marked, want 1 (2; 4 is not parked)", n)
	}
	for _, bad := range [][]string{
		{"relay", "parked", "resend"},
		{"relay", "parked", "resend", "--all", "--sequence", "2"},
		{"relay", "parked", "list", "--limit", "0"},
		{"relay", "status", "--stale", "0s"},
	} {
		code, out, errs := cli(t, vars, bad...)
		wantCode(t, strings.Join(bad, " "), code, exitUsage, out, errs)
	}
}
