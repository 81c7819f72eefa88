package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
)

func newOutbox(t testing.TB, db *testdb.DB, opts outbox.Options) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New(db.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	return ob
}

// newScene is a fresh database and an Outbox on it with the defaults.
func newScene(t *testing.T) (*testdb.DB, *outbox.Outbox) {
	t.Helper()
	db := testdb.New(t)
	return db, newOutbox(t, db, outbox.Options{})
}

func TestPublishRecordsXIDAndReturnsSequencesInOrder(t *testing.T) {
	t.Parallel()
	db, ob := newScene(t)
	ctx := context.Background()

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := ob.Publish(ctx, tx, "orders", map[string]int{"n": 1}, json.RawMessage(`{"n":2}`), []byte(`{"n":3}`))
	if err != nil {
		t.Fatal(err)
	}
	xid := testdb.Scalar[string](t, tx, `SELECT pg_current_xact_id()::text`)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 3 || seqs[0] != 1 || seqs[1] != 2 || seqs[2] != 3 {
		t.Fatalf("sequences = %v, want [1 2 3]", seqs)
	}
	rows, err := db.Pool.Query(ctx, `SELECT sequence, xid::text, payload->>'n' FROM outbox.events ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var seq int64
		var rowXID, n string
		if err := rows.Scan(&seq, &rowXID, &n); err != nil {
			t.Fatal(err)
		}
		if rowXID != xid {
			t.Fatalf("row %d xid = %s, want the writer's %s", seq, rowXID, xid)
		}
		if n != strconv.Itoa(i+1) || seq != seqs[i] {
			t.Fatalf("row %d: payload n=%s", seq, n)
		}
		i++
	}
	if i != 3 {
		t.Fatalf("%d rows, want 3", i)
	}
}

// TestWriterHasXIDBeforeItAllocates is rule 1 of docs/design.md §3: when a writer
// has been handed a sequence, it must already own an xid, or a marker xid
// taken after the head read could be older than the writer and the proof
// would pass while the writer can still commit. The writer is frozen on
// the very nextval that would allocate, by a lock on the sequence (an open
// ALTER SEQUENCE holds one nextval waits for); at that moment, before
// anything is allocated, pg_stat_activity must already show its xid. Any
// order that takes the xid after nextval (or lets the insert take it)
// fails here.
func TestWriterHasXIDBeforeItAllocates(t *testing.T) {
	t.Parallel()
	db, ob := newScene(t)
	ctx := context.Background()

	// LOCK TABLE refuses sequences; ALTER SEQUENCE takes SHARE ROW
	// EXCLUSIVE, which nextval's ROW EXCLUSIVE waits for. CACHE 1 is what
	// it already is, so nothing changes when it commits.
	const lockSequence = `BEGIN; ALTER SEQUENCE outbox.events_sequence_seq CACHE 1`
	blocker := db.Connect(t)
	testdb.Exec(t, blocker, lockSequence)
	writer := db.Connect(t)
	var writerPID uint32 = writer.PgConn().PID()

	// Each path runs twice, so the check covers a first allocation and a
	// later one. (Parked before nextval runs, the writer cannot owe its
	// xid to nextval WAL-logging the sequence, which it does on the first
	// call and every 32nd.)
	for _, path := range []string{"sql publish()", "Go Publish", "sql publish()", "Go Publish"} {
		done := make(chan error, 1)
		go func() {
			if path == "sql publish()" {
				_, err := writer.Exec(ctx, `SELECT outbox.publish('t', '{}')`)
				done <- err
				return
			}
			tx, err := writer.Begin(ctx)
			if err != nil {
				done <- err
				return
			}
			_, err = ob.Publish(ctx, tx, "t", map[string]int{})
			if err == nil {
				err = tx.Commit(ctx)
			}
			done <- err
		}()
		// release lets the writer finish its round; a failure is reported
		// only after it, so the writer's connection is idle when the test
		// ends and closes it.
		release := func() error {
			if _, err := blocker.Exec(ctx, `COMMIT`); err != nil {
				return err
			}
			return <-done
		}
		// Wait until the writer is parked on the sequence's lock, i.e. in
		// nextval, before it allocates: pg_locks names the relation it
		// waits for.
		deadline := time.Now().Add(10 * time.Second)
		for {
			parked := testdb.Scalar[bool](t, db.Pool, `SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $1 AND NOT granted
				AND relation = 'outbox.events_sequence_seq'::regclass)`, writerPID)
			if parked {
				break
			}
			if time.Now().After(deadline) {
				err := release()
				t.Fatalf("%s: writer never blocked on the sequence lock (then: %v)", path, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The xid is read only now, in a statement of its own: a
		// pg_stat_activity row reads backend_xid and wait_event at
		// different instants, so one row can show a wait that began just
		// after the xid it does not show yet. Parked, the writer's xid can
		// no longer change.
		xid := testdb.Scalar[*string](t, db.Pool, `SELECT backend_xid::text FROM pg_stat_activity WHERE pid = $1`, writerPID)
		head := testdb.Scalar[int64](t, db.Pool, `SELECT outbox.allocation_head()`)
		err := release()
		if xid == nil {
			t.Fatalf("%s: writer is allocating (head %d) without an xid", path, head)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		// Take the lock again for the next round.
		testdb.Exec(t, blocker, lockSequence)
	}
	_, _ = blocker.Exec(ctx, `ROLLBACK`)
}

func TestReadContiguousStopsAtGapAndPassesPlaceholders(t *testing.T) {
	t.Parallel()
	db, ob := newScene(t)
	ctx := context.Background()
	events := store.NewEvents(db.Schema)

	publish := func(n int) []int64 {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		payloads := make([]any, n)
		for i := range payloads {
			payloads[i] = map[string]int{"i": i}
		}
		seqs, err := ob.Publish(ctx, tx, "t", payloads...)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return seqs
	}
	publish(2) // 1, 2
	// 3 and 4 burned by a rollback.
	tx, _ := db.Pool.Begin(ctx)
	if _, err := ob.Publish(ctx, tx, "t", 1, 2); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)
	publish(1) // 5

	got, err := ob.ReadContiguous(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Sequence != 2 {
		t.Fatalf("read %v, want 1..2 and a stop before the gap at 3", sequencesOf(got))
	}
	// Reading from inside the gap still stops: 4 is missing after 3? No —
	// after 2 the next needed is 3, which is missing: nothing.
	if got, _ := ob.ReadContiguous(ctx, 2, 100); len(got) != 0 {
		t.Fatalf("read after 2 = %v, want nothing while 3 is missing", sequencesOf(got))
	}

	if _, err := events.InsertPlaceholders(ctx, db.Pool, []int64{3}, store.FilledByFill); err != nil {
		t.Fatal(err)
	}
	got, _ = ob.ReadContiguous(ctx, 2, 100)
	if len(got) != 1 || !got[0].Placeholder() || got[0].Sequence != 3 {
		t.Fatalf("read after 2 = %+v, want placeholder 3 then a stop at 4", got)
	}
	if _, err := events.InsertPlaceholders(ctx, db.Pool, []int64{4}, store.FilledByCompensate); err != nil {
		t.Fatal(err)
	}
	got, _ = ob.ReadContiguous(ctx, 0, 100)
	if want := []int64{1, 2, 3, 4, 5}; !equal(sequencesOf(got), want) {
		t.Fatalf("read = %v, want %v", sequencesOf(got), want)
	}
	if got[0].Placeholder() || got[0].Topic != "t" || got[0].XID == nil {
		t.Fatalf("real event read as %+v", got[0])
	}
	if got[3].FilledBy != store.FilledByCompensate || got[3].XID != nil || got[3].Payload != nil {
		t.Fatalf("placeholder read as %+v", got[3])
	}
	// The limit is honoured.
	if got, _ := ob.ReadContiguous(ctx, 0, 2); len(got) != 2 {
		t.Fatalf("limit 2 returned %d rows", len(got))
	}
}

func TestDeliveryTransitions(t *testing.T) {
	t.Parallel()
	db, ob := newScene(t)
	ctx := context.Background()
	tenant := "acme"
	id, err := ob.Enqueue(ctx, nil, outbox.NewDelivery{Recipient: "r1", Kind: "email", TenantID: &tenant, Payload: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	// Ack before delivery is a lost compare-and-set, not a panic.
	err = ob.Ack(ctx, nil, id)
	var conflict *outbox.StateConflictError
	if !errors.As(err, &conflict) || conflict.Actual != "pending" || !errors.Is(err, outbox.ErrLostRace) {
		t.Fatalf("ack of a pending row: %v", err)
	}

	tx, _ := db.Pool.Begin(ctx)
	claimed, err := ob.ClaimPending(ctx, tx, 10)
	if err != nil || len(claimed) != 1 || claimed[0].ID != id || string(claimed[0].Payload) != "hi" {
		t.Fatalf("claim: %v %+v", err, claimed)
	}
	// A second relay skips the locked row instead of waiting.
	tx2, _ := db.Pool.Begin(ctx)
	other, err := ob.ClaimPending(ctx, tx2, 10)
	if err != nil || len(other) != 0 {
		t.Fatalf("second claim saw %d rows (err %v), want 0: SKIP LOCKED", len(other), err)
	}
	_ = tx2.Rollback(ctx)
	if err := ob.MarkDelivered(ctx, tx, id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ob.Ack(ctx, nil, id); err != nil {
		t.Fatal(err)
	}
	var state string
	var attempts int
	var deliveredAt, ackedAt *time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT state, attempts, delivered_at, acked_at FROM outbox.deliveries WHERE id = $1`, id).
		Scan(&state, &attempts, &deliveredAt, &ackedAt); err != nil {
		t.Fatal(err)
	}
	if state != "acked" || attempts != 1 || deliveredAt == nil || ackedAt == nil {
		t.Fatalf("after ack: state=%s attempts=%d delivered_at=%v acked_at=%v", state, attempts, deliveredAt, ackedAt)
	}
	if err := ob.MarkDelivered(ctx, nil, 999999); !errors.As(err, &conflict) || conflict.Actual != "" {
		t.Fatalf("mark of a missing row: %v", err)
	}
}

// TestRacingTransitionsHaveOneWinner races two MarkDelivered calls, then two
// Ack calls, on the same rows from separate connections: each compare-and-set
// has exactly one winner and one typed loser.
func TestRacingTransitionsHaveOneWinner(t *testing.T) {
	t.Parallel()
	db, ob := newScene(t)
	ctx := context.Background()
	const rows = 50
	ids := make([]int64, rows)
	for i := range ids {
		id, err := ob.Enqueue(ctx, nil, outbox.NewDelivery{Recipient: "r", Kind: "k", Payload: []byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	race := func(name string, op func(int64) error) {
		for _, id := range ids {
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range 2 {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = op(id) }()
			}
			wg.Wait()
			wins, losses := 0, 0
			for _, err := range errs {
				switch {
				case err == nil:
					wins++
				case errors.Is(err, outbox.ErrLostRace):
					losses++
				default:
					t.Fatalf("%s %d: unexpected error %v", name, id, err)
				}
			}
			if wins != 1 || losses != 1 {
				t.Fatalf("%s %d: %d winners, %d losers", name, id, wins, losses)
			}
		}
	}
	race("MarkDelivered", func(id int64) error { return ob.MarkDelivered(ctx, nil, id) })
	race("Ack", func(id int64) error { return ob.Ack(ctx, nil, id) })
	badAttempts := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE attempts <> 1 OR state <> 'acked'`)
	if badAttempts != 0 {
		t.Fatalf("%d rows delivered twice or not acked", badAttempts)
	}
}

func sequencesOf(evs []outbox.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Sequence
	}
	return out
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var _ = pgx.ErrNoRows

// TestDeliveredAtIsTheMarkTime: a relay that claims, pushes and marks in
// one transaction must stamp the time of the mark, not of the claim, or a
// slow push would look stuck to the sweep the moment it commits.
func TestDeliveredAtIsTheMarkTime(t *testing.T) {
	t.Parallel()
	db, ob := newScene(t)
	ctx := context.Background()
	id, err := ob.Enqueue(ctx, nil, outbox.NewDelivery{Recipient: "r", Kind: "k", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	claimedAt := testdb.Scalar[time.Time](t, tx, `SELECT now()`)
	if _, err := ob.ClaimPending(ctx, tx, 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the push
	if err := ob.MarkDelivered(ctx, tx, id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	deliveredAt := testdb.Scalar[time.Time](t, db.Pool, `SELECT delivered_at FROM outbox.deliveries WHERE id = $1`, id)
	if deliveredAt.Sub(claimedAt) < 250*time.Millisecond {
		t.Fatalf("delivered_at %s is the claim time %s, not the mark time", deliveredAt, claimedAt)
	}
}

// Publish with an outbox.Routing argument writes the routing columns, as
// the writer role, through the plain INSERT: sequences in the payloads'
// order, the transaction's xid in every row.
func TestPublishWithRoutingWritesTheRoutingColumns(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ob, err := outbox.New(db.Writer(t).Pool, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var seqs []int64
	var xid uint64
	if err := ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
		var err error
		seqs, err = tx.Publish(ctx, "order.placed", json.RawMessage(`{"n":1}`), json.RawMessage(`{"n":2}`), json.RawMessage(`{"n":3}`),
			outbox.Routing{AggregateType: "order", AggregateID: "42"}, outbox.Headers{"h": 1})
		xid, _ = tx.XID()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !equal(seqs, []int64{1, 2, 3}) {
		t.Fatalf("published %v, want [1 2 3]", seqs)
	}
	evs, err := ob.ReadContiguous(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if want := fmt.Sprintf(`{"n": %d}`, i+1); string(e.Payload) != want {
			t.Errorf("event %d payload %s, want %s: in the payloads' order", e.Sequence, e.Payload, want)
		}
		if e.AggregateType != "order" || e.AggregateID != "42" || e.EventType != "" || string(e.Headers) != `{"h": 1}` {
			t.Errorf("event %d = %+v, want order/42 with no event type and the headers", e.Sequence, e)
		}
		if e.XID == nil || *e.XID != xid {
			t.Errorf("event %d xid %v, want %d", e.Sequence, e.XID, xid)
		}
	}
	err = ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
		_, err := tx.Publish(ctx, "t", 1, outbox.Routing{AggregateID: "a"}, outbox.Routing{AggregateID: "b"})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "more than one outbox.Routing") {
		t.Errorf("two Routing arguments: %v, want a refusal", err)
	}
}
