package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// dead list says why each row is dead: the deliver function's reason
// (unknown_recipient, recipient_disabled, gone), or none for a row the
// sweep made dead at its redelivery limit; --json as the column holds it.
func TestDeadListShowsEachRowsReason(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	vars := map[string]string{"DATABASE_URL": db.Operator(t).URL}
	insert := func(recipient string, reason *string) int64 {
		t.Helper()
		return testdb.Scalar[int64](t, db.Pool, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, dead_at, dead_reason)
			VALUES ($1, 'k', '{}', 'dead', 1, now(), $2) RETURNING id`, recipient, reason)
	}
	gone, unknown := "gone", "unknown_recipient"
	ids := map[int64]*string{insert("hook", &gone): &gone, insert("nobody", &unknown): &unknown, insert("ledger", nil): nil}

	code, out, errs := cli(t, vars, "dead", "list")
	wantCode(t, "dead list", code, exitOK, out, errs)
	wantIn(t, "dead list", out, "REASON")
	for _, c := range []struct{ recipient, reason string }{{"hook", "gone"}, {"nobody", "unknown_recipient"}, {"ledger", "-"}} {
		t.Run(c.recipient, func(t *testing.T) {
			for _, line := range strings.Split(out, "\n") {
				f := strings.Fields(line)
				if len(f) > 1 && f[1] == c.recipient {
					if got := f[len(f)-1]; got != c.reason {
						t.Errorf("the row of %s ends %q, want its reason %q:\n%s", c.recipient, got, c.reason, out)
					}
					return
				}
			}
			t.Errorf("no row of %s:\n%s", c.recipient, out)
		})
	}

	code, out, _ = cli(t, vars, "dead", "list", "--json")
	var listed []struct {
		ID         int64
		DeadReason *string `json:"dead_reason"`
	}
	if err := json.Unmarshal([]byte(out), &listed); err != nil || code != exitOK || len(listed) != len(ids) {
		t.Fatalf("dead list --json exits %d with %d rows: %v\n%s", code, len(listed), err, out)
	}
	for _, r := range listed {
		want := ids[r.ID]
		switch {
		case want == nil && r.DeadReason != nil:
			t.Errorf("delivery %d: dead_reason %q, want null (the sweep's)", r.ID, *r.DeadReason)
		case want != nil && (r.DeadReason == nil || *r.DeadReason != *want):
			t.Errorf("delivery %d: dead_reason %v, want %q", r.ID, r.DeadReason, *want)
		}
	}
}
