package prune_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/passtest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
)

// ---- helpers ---------------------------------------------------------------

// templateConfig is the template's settings (the defaults) with events
// pruned after a day, which the template leaves to the operator.
func templateConfig(mut ...func(*prune.Config)) prune.Config {
	c := prune.Config{Schema: testdb.Schema, EventsAfter: 24 * time.Hour}
	for _, m := range mut {
		m(&c)
	}
	return c
}

func newPruner(t testing.TB, db pass.DB, cfg prune.Config) *prune.Service {
	t.Helper()
	return passtest.Built(prune.New(db, cfg, prune.Options{}))(t)
}

func run(t testing.TB, s *prune.Service) *prune.Result {
	t.Helper()
	return passtest.Run(t, context.Background(), s)
}

// pruneState is one counter of prune_state, by its column.
func pruneState(t testing.TB, db *testdb.DB, column string) int64 {
	t.Helper()
	return testdb.Scalar[int64](t, db.Pool, `SELECT `+column+` FROM outbox.prune_state`)
}

// seedAckedOld inserts n rows of the shape "acked-old": acked two days
// ago, past the default retention of acked rows, so a prune deletes them.
func seedAckedOld(t testing.TB, db *testdb.DB, n int) {
	t.Helper()
	seedDeliveries(t, db, "acked-old", "acked", n, 3*day, 2*day, 0, 2*day)
}

// seedDeliveries inserts n rows of one shape: state, created ago, and its
// acked_at / dead_at / delivered_at ago (0: NULL), returning nothing; the
// recipient names the shape, so a test counts what is left by it.
func seedDeliveries(t testing.TB, db *testdb.DB, shape, state string, n int, created, acked, dead, delivered time.Duration) {
	t.Helper()
	ago := func(d time.Duration) any {
		if d == 0 {
			return nil
		}
		return d.Microseconds()
	}
	testdb.Exec(t, db.Pool, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, created_at, acked_at, dead_at, delivered_at)
		SELECT $1, 'work', '\x00'::bytea, $2, 1,
			now() - $4::bigint * interval '1 microsecond',
			now() - $5::bigint * interval '1 microsecond',
			now() - $6::bigint * interval '1 microsecond',
			now() - $7::bigint * interval '1 microsecond'
		FROM generate_series(1, $3)`, shape, state, n, created.Microseconds(), ago(acked), ago(dead), ago(delivered))
}

func left(t testing.TB, db *testdb.DB, shape string) int64 {
	t.Helper()
	return testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE recipient = $1`, shape)
}

// seedEvents writes real events 1..n recorded `ago` in the past, with the
// sequence moved past them, as publish would have.
func seedEvents(t testing.TB, db *testdb.DB, from, to int64, ago time.Duration) {
	t.Helper()
	testdb.Exec(t, db.Pool, `INSERT INTO outbox.events (sequence, xid, topic, payload, recorded_at)
		SELECT g, '5'::xid8, 'seeded', '{}', now() - $3::bigint * interval '1 microsecond'
		FROM generate_series($1::bigint, $2::bigint) g`, from, to, ago.Microseconds())
	testdb.Exec(t, db.Pool, `SELECT setval('outbox.events_sequence_seq', GREATEST($1::bigint, (SELECT last_value FROM outbox.events_sequence_seq)))`, to)
}

func setWatermark(t testing.TB, db *testdb.DB, w int64) {
	t.Helper()
	testdb.Exec(t, db.Pool, `UPDATE outbox.fill_state SET started = true, watermark = $1`, w)
}

func eventsLeft(t testing.TB, db *testdb.DB) (n, lowest int64) {
	t.Helper()
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*), coalesce(min(sequence), 0) FROM outbox.events`).Scan(&n, &lowest); err != nil {
		t.Fatal(err)
	}
	return n, lowest
}

const day = 24 * time.Hour

// ---- deliveries -----------------------------------------------------------------

// Acked rows past PRUNE_ACKED_AFTER and dead rows past PRUNE_DEAD_AFTER go;
// younger ones stay; open rows stay however old they are and whatever
// timestamps they carry (an operator's retry moves a dead row back to
// pending, and a row may have been acked once in a test or a migration).
func TestPruneDeletesAckedAndDeadPastRetentionNeverOpen(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedAckedOld(t, db, 30)
	seedDeliveries(t, db, "acked-young", "acked", 7, 3*day, time.Hour, 0, time.Hour)
	seedDeliveries(t, db, "dead-old", "dead", 5, 10*day, 0, 8*day, 9*day)
	seedDeliveries(t, db, "dead-young", "dead", 4, 10*day, 0, 6*day, 9*day)
	seedDeliveries(t, db, "pending-old", "pending", 3, 30*day, 0, 20*day, 0)
	seedDeliveries(t, db, "delivered-old", "delivered", 2, 30*day, 0, 20*day, 29*day)
	seedDeliveries(t, db, "pending-new", "pending", 2, time.Minute, 0, 0, 0)

	res := run(t, newPruner(t, db.Pool, templateConfig()))

	if res.DeletedAcked != 30 {
		t.Errorf("deleted_acked = %d, want 30", res.DeletedAcked)
	}
	if res.DeletedDead != 5 {
		t.Errorf("deleted_dead = %d, want 5", res.DeletedDead)
	}
	if res.DeletedDeliveries != 35 {
		t.Errorf("deleted_deliveries = %d, want 35", res.DeletedDeliveries)
	}
	for shape, want := range map[string]int64{"acked-old": 0, "acked-young": 7, "dead-old": 0, "dead-young": 4,
		"pending-old": 3, "delivered-old": 2, "pending-new": 2} {
		if got := left(t, db, shape); got != want {
			t.Errorf("%s rows left = %d, want %d", shape, got, want)
		}
	}
}

// PRUNE_DEAD_AFTER=0 keeps dead rows forever; acked ones still go.
func TestPruneKeepsDeadWhenTold(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedAckedOld(t, db, 3)
	seedDeliveries(t, db, "dead-ancient", "dead", 4, 400*day, 0, 399*day, 399*day)
	res := run(t, newPruner(t, db.Pool, templateConfig(func(c *prune.Config) { c.DeadAfter = pass.Off })))
	if res.DeletedDead != 0 {
		t.Errorf("deleted_dead = %d, want 0", res.DeletedDead)
	}
	if got := left(t, db, "dead-ancient"); got != 4 {
		t.Errorf("dead rows left = %d, want 4", got)
	}
	if got := left(t, db, "acked-old"); got != 0 {
		t.Errorf("old acked rows left = %d, want 0", got)
	}
}

// A second pass over what the first left finds nothing: each row goes once.
func TestSecondPruneDeletesNothing(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedAckedOld(t, db, 12)
	s := newPruner(t, db.Pool, templateConfig(func(c *prune.Config) { c.BatchLimit = 5 }))
	if first := run(t, s); first.DeletedDeliveries != 12 {
		t.Fatalf("first pass deleted %d, want 12", first.DeletedDeliveries)
	}
	if second := run(t, s); second.DeletedDeliveries != 0 {
		t.Errorf("second pass deleted %d, want 0", second.DeletedDeliveries)
	}
	counts.Want(t, "prune_state",
		counts.Of("passes", pruneState(t, db, "passes"), 2),
		counts.Of("deleted_deliveries_total", pruneState(t, db, "deleted_deliveries_total"), 12),
	)
}

// The pass stops at the first row too young to be past any retention and
// does not read the young tail of the table; a later pass moves on.
func TestPruneStopsAtTheYoungTail(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedAckedOld(t, db, 10)
	seedDeliveries(t, db, "acked-young", "acked", 50, time.Hour, time.Minute, 0, time.Minute)
	seedDeliveries(t, db, "acked-old-late", "acked", 10, 3*day, 2*day, 0, 2*day)
	res := run(t, newPruner(t, db.Pool, prune.Config{Schema: testdb.Schema, BatchLimit: 20}))
	if res.DeletedDeliveries != 10 {
		t.Errorf("deleted_deliveries = %d, want the 10 before the young rows", res.DeletedDeliveries)
	}
	if res.Batches != 1 {
		t.Errorf("batches = %d, want 1: the young edge ends the pass", res.Batches)
	}
}

// ---- events -------------------------------------------------------------------

// Events are kept forever unless PRUNE_EVENTS_AFTER is set.
func TestPruneKeepsEventsByDefault(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedEvents(t, db, 1, 20, 400*day)
	setWatermark(t, db, 20)
	res := run(t, newPruner(t, db.Pool, prune.Config{Schema: testdb.Schema}))
	if res.DeletedEvents != 0 {
		t.Errorf("deleted_events = %d, want 0", res.DeletedEvents)
	}
	if res.Watermark != nil {
		t.Errorf("watermark = %d, want null when events are kept", *res.Watermark)
	}
	if n, _ := eventsLeft(t, db); n != 20 {
		t.Errorf("events left = %d, want 20", n)
	}
}

// Never an event above the fill watermark: a sequence missing above it may
// still be committed, so read_events stops there, and a pruned row past it
// would look to a reader like a gap it must wait on.
func TestPruneNeverDeletesAnEventAboveTheWatermark(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedEvents(t, db, 1, 100, 2*day)
	setWatermark(t, db, 60)
	res := run(t, newPruner(t, db.Pool, templateConfig()))
	if res.DeletedEvents != 60 {
		t.Errorf("deleted_events = %d, want 60", res.DeletedEvents)
	}
	n, lowest := eventsLeft(t, db)
	if n != 40 {
		t.Errorf("events left = %d, want 40", n)
	}
	if lowest != 61 {
		t.Errorf("lowest event left = %d, want 61", lowest)
	}
	if res.KeptForConsumer != nil {
		t.Errorf("kept_for_consumer = %q, want null", *res.KeptForConsumer)
	}
}

// Nor one a registered consumer has not passed: the slowest bounds the
// prune, and the response names it.
func TestPruneNeverDeletesAnEventAConsumerHasNotPassed(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedEvents(t, db, 1, 100, 2*day)
	setWatermark(t, db, 100)
	testdb.Exec(t, db.Pool, `SELECT outbox.commit_position('billing', 30), outbox.commit_position('search', 70)`)
	res := run(t, newPruner(t, db.Pool, templateConfig()))
	if res.DeletedEvents != 30 {
		t.Errorf("deleted_events = %d, want 30", res.DeletedEvents)
	}
	if _, lowest := eventsLeft(t, db); lowest != 31 {
		t.Errorf("lowest event left = %d, want 31", lowest)
	}
	if res.KeptForConsumer == nil || *res.KeptForConsumer != "billing" {
		t.Errorf("kept_for_consumer = %v, want billing", res.KeptForConsumer)
	}
	if res.EventsUpto == nil || *res.EventsUpto != 30 {
		t.Errorf("events_upto = %v, want 30", res.EventsUpto)
	}
	// billing moves on: the next pass follows it, not beyond search.
	testdb.Exec(t, db.Pool, `SELECT outbox.commit_position('billing', 90)`)
	res = run(t, newPruner(t, db.Pool, templateConfig()))
	if res.DeletedEvents != 40 {
		t.Errorf("second pass deleted_events = %d, want 40", res.DeletedEvents)
	}
	if res.KeptForConsumer == nil || *res.KeptForConsumer != "search" {
		t.Errorf("second pass kept_for_consumer = %v, want search", res.KeptForConsumer)
	}
}

// Events recorded more recently than PRUNE_EVENTS_AFTER stay, and the pass
// ends at the first of them (a prefix, in sequence order).
func TestPruneKeepsYoungEvents(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedEvents(t, db, 1, 50, 2*day)
	seedEvents(t, db, 51, 100, time.Hour)
	setWatermark(t, db, 100)
	res := run(t, newPruner(t, db.Pool, templateConfig()))
	if res.DeletedEvents != 50 {
		t.Errorf("deleted_events = %d, want 50", res.DeletedEvents)
	}
	if _, lowest := eventsLeft(t, db); lowest != 51 {
		t.Errorf("lowest event left = %d, want 51", lowest)
	}
}

// Placeholders are events too, and go with them.
func TestPruneDeletesPlaceholders(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedEvents(t, db, 1, 10, 2*day)
	testdb.Exec(t, db.Pool, `INSERT INTO outbox.events (sequence, filled_by, recorded_at) VALUES (11, 'fill', now() - interval '2 days')`)
	testdb.Exec(t, db.Pool, `SELECT setval('outbox.events_sequence_seq', 11)`)
	setWatermark(t, db, 11)
	if res := run(t, newPruner(t, db.Pool, templateConfig())); res.DeletedEvents != 11 {
		t.Errorf("deleted_events = %d, want 11", res.DeletedEvents)
	}
}

// ---- concurrency and budget -----------------------------------------------

// Two passes at once (a slow pass and the next hour's) share the work: each
// row is deleted and counted by exactly one of them (one waits for the
// other's batch at most).
func TestOverlappingPrunePassesDeleteEachRowOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	const n = 20000
	seedAckedOld(t, db, n)
	seedEvents(t, db, 1, n, 2*day)
	setWatermark(t, db, n)
	cfg := templateConfig(func(c *prune.Config) { c.BatchLimit = 250 })
	results := make([]*prune.Result, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range results {
		s := newPruner(t, db.Pool, cfg)
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.RunOnce(context.Background(), nil)
		})
	}
	close(start)
	wg.Wait()
	var deliveries, events int64
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("pass %d: %v", i, errs[i])
		}
		deliveries += r.DeletedDeliveries
		events += r.DeletedEvents
	}
	if deliveries != n {
		t.Errorf("deleted_deliveries summed over both passes = %d, want %d", deliveries, n)
	}
	if events != n {
		t.Errorf("deleted_events summed over both passes = %d, want %d", events, n)
	}
	if got := left(t, db, "acked-old"); got != 0 {
		t.Errorf("deliveries left = %d, want 0", got)
	}
	if got, _ := eventsLeft(t, db); got != 0 {
		t.Errorf("events left = %d, want 0", got)
	}
}

// A million acked deliveries: a pass stops on its budget (More, a normal
// response) and the next passes resume where the table now starts, until
// none is left, each row deleted once. The template's batch size.
func TestPruneOfAMillionAckedRowsKeepsItsBudgetAndResumes(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	const n = 1_000_000
	seedAckedOld(t, db, n)
	// A fast machine deletes a million rows inside any short budget, so
	// the pass's clock also moves a quarter of the budget per delete it
	// sends: every pass ends on its budget within four batches, however
	// fast the database, and still within it in real time.
	const budget = 500 * time.Millisecond
	q := &passtest.StatementClock{DB: db.Pool, Tag: store.DeliveriesSQL.Tag("prune"), Step: budget / 4}
	s := passtest.Built(prune.New(q, templateConfig(func(c *prune.Config) { c.PassBudget = budget }), prune.Options{Options: pass.Options{Now: q.Now}}))(t)
	var total int64
	passes := 0
	for {
		res := run(t, s)
		passes++
		total += res.DeletedDeliveries
		// The budget, its statements bounded by it, and the one second
		// the pass's record may take after it.
		if limit := budget + time.Second + 500*time.Millisecond; time.Duration(res.DurationMS)*time.Millisecond > limit {
			t.Errorf("pass %d took %d ms, over its budget of %s (+1s for its record)", passes, res.DurationMS, budget)
		}
		if !res.More {
			break
		}
		if passes > 4*n/prune.DefaultBatchLimit {
			t.Fatalf("still more after %d passes (deleted %d)", passes, total)
		}
	}
	t.Logf("%d rows deleted in %d passes of at most %s", total, passes, budget)
	if passes < 2 {
		t.Errorf("passes = %d: a million rows fitted in one %s budget, so resuming was not tested", passes, budget)
	}
	if total != n {
		t.Errorf("deleted over %d passes = %d, want %d", passes, total, n)
	}
	if got := left(t, db, "acked-old"); got != 0 {
		t.Errorf("acked rows left = %d, want 0", got)
	}
}

// A statement blocked on a lock another session holds ends the pass on its
// budget with a normal response naming it.
func TestPruneBlockedOnALockEndsOnItsBudget(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedAckedOld(t, db, 3)
	ctx := context.Background()
	holder := db.Connect(t)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the test's end
	if _, err := tx.Exec(ctx, `LOCK TABLE outbox.deliveries IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	s := newPruner(t, db.Pool, templateConfig(func(c *prune.Config) { c.PassBudget = 500 * time.Millisecond }))
	res, err := s.RunOnce(ctx, nil)
	if err != nil {
		t.Fatalf("RunOnce: %v, want a normal response", err)
	}
	if res.TimedOut == "" {
		t.Errorf("timed_out is empty, want the blocked statement")
	}
	if !res.More {
		t.Errorf("more = false, want true: the rows are still there")
	}
	_ = tx.Rollback(ctx)
	if got := left(t, db, "acked-old"); got != 3 {
		t.Errorf("rows left = %d, want 3 (the blocked batch rolled back)", got)
	}
}

// A cancelled invocation returns the error and leaves every batch whole.
func TestPruneCancelled(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedAckedOld(t, db, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newPruner(t, db.Pool, templateConfig()).RunOnce(ctx, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("RunOnce on a cancelled context: %v, want context.Canceled", err)
	}
}

// The finish rule: a pass whose invocation was cancelled still records
// itself in prune_state, in the time the budget keeps for its last
// statement.
func TestACancelledPruneIsStillRecorded(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedAckedOld(t, db, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := newPruner(t, db.Pool, templateConfig()).RunOnce(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("RunOnce on a cancelled context: %v, want context.Canceled", err)
	}
	if passes := pruneState(t, db, "passes"); passes != 1 {
		t.Errorf("prune_state.passes = %d after a cancelled pass, want it recorded", passes)
	}
}

// A row moved back to pending by another session while the prune's
// delete waits for it (an operator retrying a dead delivery, here an
// acked one, at the very moment) is judged on that latest version: it is
// open, so it stays; the rest of its batch goes.
func TestPruneKeepsARowReopenedWhileItsBatchWaited(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedAckedOld(t, db, 10)
	ctx := context.Background()
	reopened := testdb.Scalar[int64](t, db.Pool, `SELECT min(id) + 4 FROM outbox.deliveries`)
	operator := db.Connect(t)
	tx, err := operator.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	if _, err := tx.Exec(ctx, `UPDATE outbox.deliveries SET state = 'pending', acked_at = NULL WHERE id = $1`, reopened); err != nil {
		t.Fatal(err)
	}
	done := make(chan *prune.Result, 1)
	go func() {
		res, err := newPruner(t, db.Pool, templateConfig()).RunOnce(ctx, nil)
		if err != nil {
			t.Errorf("RunOnce: %v", err)
		}
		done <- res
	}()
	// The pass's delete waits on the operator's row lock.
	deadline := time.Now().Add(10 * time.Second)
	for testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`, store.DeliveriesSQL.Tag("prune")+"%") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the prune's delete never waited on the reopened row")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res == nil {
		t.FailNow()
	}
	if res.DeletedDeliveries != 9 {
		t.Errorf("deleted_deliveries = %d, want the 9 still acked", res.DeletedDeliveries)
	}
	if state := testdb.Scalar[string](t, db.Pool, `SELECT coalesce((SELECT state FROM outbox.deliveries WHERE id = $1), 'deleted')`, reopened); state != "pending" {
		t.Errorf("the reopened row is %s, want it kept as pending", state)
	}
}
