package sweep_test

import (
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// Each pass reports the consumers: the largest lag behind the head, and
// the one holding retention back (its oldest untaken event is older than
// the retention the prune recorded) and for how long, as the maintainer.
func TestSweepReportsConsumerLagAndRetentionHeld(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for range 10 {
		db.Exec(t, `SELECT outbox.publish('t', '{}')`)
	}
	db.Exec(t, `UPDATE outbox.events SET recorded_at = now() - interval '3 hours' WHERE sequence <= 5`)
	db.Exec(t, `UPDATE outbox.fill_state SET started = true, watermark = 10`)
	db.Exec(t, `UPDATE outbox.prune_state SET events_after = interval '1 hour'`)
	db.Exec(t, `SELECT outbox.commit_position('billing', 10)`)
	db.Exec(t, `SELECT outbox.commit_position('search', 2)`)

	res := run(t, newSweeper(t, db.Maintainer(t).Pool))
	if res.ConsumerLag != 8 {
		t.Errorf("consumer_lag = %d, want 8 (search at 2, head 10)", res.ConsumerLag)
	}
	if res.ConsumersHolding != 1 {
		t.Errorf("consumers_holding_retention = %d, want 1 (search)", res.ConsumersHolding)
	}
	if res.ConsumerHeldS < 7100 || res.ConsumerHeldS > 7300 {
		t.Errorf("consumer_held_s = %.0f, want about 7200 (event 3 recorded 3h ago, retention 1h)", res.ConsumerHeldS)
	}
	names := map[string]float64{}
	for _, m := range res.Metrics() {
		names[m.Name] = m.Value
	}
	if v, ok := names["ConsumerLag"]; !ok || v != 8 {
		t.Errorf("metric ConsumerLag = %v (present %v), want 8", v, ok)
	}
	if _, ok := names["ConsumerHeldSeconds"]; !ok {
		t.Errorf("no ConsumerHeldSeconds metric: %v", names)
	}
}

// With the retention off (0: events kept forever), nobody holds it back.
func TestSweepReportsNoRetentionHeldWhenEventsAreKeptForever(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	db.Exec(t, `SELECT outbox.publish('t', '{}')`)
	db.Exec(t, `SELECT outbox.publish('t', '{}')`)
	db.Exec(t, `UPDATE outbox.events SET recorded_at = now() - interval '3 hours'`)
	db.Exec(t, `UPDATE outbox.fill_state SET started = true, watermark = 2`)
	db.Exec(t, `UPDATE outbox.prune_state SET events_after = interval '0'`)
	db.Exec(t, `SELECT outbox.commit_position('search', 0)`)
	res := run(t, newSweeper(t, db.Maintainer(t).Pool))
	if res.ConsumersHolding != 0 || res.ConsumerHeldS != 0 {
		t.Errorf("holding %d for %.0fs with events kept forever, want none", res.ConsumersHolding, res.ConsumerHeldS)
	}
}
