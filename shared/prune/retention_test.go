package prune_test

import (
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
)

// Each pass records the event retention it ran with, as the maintainer:
// what consumer_status and rewind_consumer read to tell whether a
// consumer holds retention back. Kept forever is 0, not NULL (unknown).
func TestPruneRecordsItsEventRetention(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		after time.Duration
		want  string
	}{
		{"an hour", time.Hour, "01:00:00"},
		{"forever", pass.Off, "00:00:00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			if got := testdb.Scalar[string](t, db.Pool, `SELECT coalesce(events_after::text, 'null') FROM outbox.prune_state`); got != "null" {
				t.Errorf("before any pass events_after = %s, want null", got)
			}
			run(t, newPruner(t, db.Maintainer(t).Pool, prune.Config{EventsAfter: c.after}))
			if got := testdb.Scalar[string](t, db.Pool, `SELECT coalesce(events_after::text, 'null') FROM outbox.prune_state`); got != c.want {
				t.Errorf("events_after = %s, want %s", got, c.want)
			}
		})
	}
}
