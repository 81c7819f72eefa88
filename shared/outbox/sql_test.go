package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
)

// The library on database/sql, through pgx's stdlib driver ("pgx"), as
// the writer role: the same statements and rules as on pgx.

func sqlDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func newSQLOutbox(t *testing.T, db *sql.DB, opts outbox.Options) *outbox.SQLOutbox {
	t.Helper()
	ob, err := outbox.NewSQL(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return ob
}

// Publish, read, consume and the head on database/sql: headers and
// routing columns written and read back, the xid stored, sequences in
// order.
func TestSQLOutboxPublishesReadsAndConsumes(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	writer := db.Writer(t)
	ctx := context.Background()
	ob := newSQLOutbox(t, sqlDB(t, writer.URL), outbox.Options{})

	var seqs []int64
	var xid uint64
	err := ob.InTx(ctx, func(ctx context.Context, tx *outbox.SQLTx) error {
		s, err := tx.Publish(ctx, "order.placed", map[string]int{"id": 1}, json.RawMessage(`{"id":2}`), outbox.Headers{"trace": "t"})
		if err != nil {
			return err
		}
		r, err := tx.Publish(ctx, "order.placed", json.RawMessage(`{"id":3}`), outbox.Routing{AggregateType: "order", AggregateID: "3", EventType: "OrderPlaced"})
		if err != nil {
			return err
		}
		seqs = append(s, r...)
		xid, _ = tx.XID()
		return nil
	})
	if err != nil {
		t.Fatalf("InTx: %v", err)
	}
	if !slices.Equal(seqs, []int64{1, 2, 3}) {
		t.Errorf("published %v, want [1 2 3]", seqs)
	}
	evs, err := ob.ReadContiguous(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 {
		t.Fatalf("read %d events, want 3", len(evs))
	}
	for _, e := range evs {
		if e.XID == nil || *e.XID != xid {
			t.Errorf("event %d has xid %v, want the transaction's %d", e.Sequence, e.XID, xid)
		}
	}
	if string(evs[0].Headers) != `{"trace": "t"}` {
		t.Errorf("event 1 headers %s, want the trace", evs[0].Headers)
	}
	if e := evs[2]; e.AggregateType != "order" || e.AggregateID != "3" || e.EventType != "OrderPlaced" || string(e.Payload) != `{"id": 3}` {
		t.Errorf("event 3 = %+v, want the routing columns order/3/OrderPlaced and its payload", e)
	}
	if h, err := ob.Head(ctx); err != nil || h != 3 {
		t.Errorf("Head = %d, %v; want 3", h, err)
	}

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var consumed []int64
	err = ob.Consume(cctx, outbox.ConsumerOptions{Name: "billing", Batch: 2, Poll: 50 * time.Millisecond},
		func(_ context.Context, events []outbox.Event) error {
			for _, e := range events {
				consumed = append(consumed, e.Sequence)
			}
			if len(consumed) == 3 {
				cancel()
			}
			return nil
		})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Consume = %v, want the cancellation", err)
	}
	if !slices.Equal(consumed, []int64{1, 2, 3}) {
		t.Errorf("consumed %v, want [1 2 3]", consumed)
	}
	if pos := testdb.Scalar[int64](t, db.Pool, `SELECT position FROM outbox.consumers WHERE name = 'billing'`); pos < 2 {
		t.Errorf("billing's position %d, want its commits", pos)
	}
}

// Rollback reports on database/sql: a failed InTx reports everything it
// published with its xid, a savepoint rolled back inside a committed one
// reports its own, a wrapped transaction that rolls back reports, and one
// that committed reports nothing and answers sql.ErrTxDone afterwards.
func TestSQLOutboxReportsRollbacks(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	reporter, received := sqsReporter(t, 0)
	sdb := sqlDB(t, db.Writer(t).URL)
	ob := newSQLOutbox(t, sdb, outbox.Options{Reporter: reporter})

	declined := errors.New("declined")
	var xid uint64
	err := ob.InTx(ctx, func(ctx context.Context, tx *outbox.SQLTx) error {
		if _, err := tx.Publish(ctx, "t", 1, 2); err != nil {
			return err
		}
		xid, _ = tx.XID()
		return declined
	})
	if !errors.Is(err, declined) {
		t.Fatalf("InTx = %v, want the handler's error", err)
	}
	if got := received(1); len(got) != 1 || got[0].XID != xid || !slices.Equal(got[0].Sequences, []int64{1, 2}) {
		t.Errorf("after the failed InTx the report is %+v, want xid %d and [1 2]", got, xid)
	}

	err = ob.InTx(ctx, func(ctx context.Context, tx *outbox.SQLTx) error {
		if _, err := tx.Publish(ctx, "t", 3); err != nil { // 3 commits
			return err
		}
		_ = tx.Savepoint(ctx, func(ctx context.Context, tx *outbox.SQLTx) error {
			if _, err := tx.Publish(ctx, "t", 4); err != nil {
				return err
			}
			return declined
		})
		return tx.Savepoint(ctx, func(ctx context.Context, tx *outbox.SQLTx) error {
			_, err := tx.Publish(ctx, "t", 5) // released: 5 commits
			return err
		})
	}, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatalf("InTx with savepoints: %v", err)
	}
	if got := received(1); len(got) != 1 || !slices.Equal(got[0].Sequences, []int64{4}) {
		t.Errorf("after the savepoint's rollback the report is %+v, want [4]", got)
	}
	present := testdb.Column[int64](t, db.Pool, `SELECT sequence FROM outbox.events ORDER BY sequence`)
	if !slices.Equal(present, []int64{3, 5}) {
		t.Errorf("events %v, want [3 5]", present)
	}

	stx, err := sdb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx := ob.Wrap(stx)
	if _, err := tx.Publish(ctx, "t", 6); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := received(1); len(got) != 1 || !slices.Equal(got[0].Sequences, []int64{6}) {
		t.Errorf("after the wrapped rollback the report is %+v, want [6]", got)
	}

	stx, err = sdb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx = ob.Wrap(stx)
	if _, err := tx.Publish(ctx, "t", 7); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
		t.Errorf("Rollback after Commit = %v, want sql.ErrTxDone", err)
	}
	wantNoReport(t, received)
}

// Deliveries on database/sql: enqueue inside the application's
// transaction, claim, mark, ack, and a lost compare-and-set.
func TestSQLOutboxDrivesDeliveries(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	sdb := sqlDB(t, db.Writer(t).URL)
	ob := newSQLOutbox(t, sdb, outbox.Options{})
	tenant := "t1"
	stx, err := sdb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := ob.Enqueue(ctx, stx, outbox.NewDelivery{Recipient: "billing", Kind: "invoice", TenantID: &tenant, Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := ob.ClaimPending(ctx, stx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 1 || claimed[0].ID != id || *claimed[0].TenantID != "t1" || string(claimed[0].Payload) != "x" || claimed[0].DeliveredAt != nil {
		t.Errorf("claimed %+v, want the pending delivery %d", claimed, id)
	}
	if err := ob.MarkDelivered(ctx, stx, id); err != nil {
		t.Fatal(err)
	}
	if err := stx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := ob.Ack(ctx, nil, id); err != nil {
		t.Errorf("Ack: %v", err)
	}
	var conflict *outbox.StateConflictError
	if err := ob.Ack(ctx, nil, id); !errors.As(err, &conflict) || conflict.Actual != "acked" {
		t.Errorf("a second Ack = %v, want a conflict naming acked", err)
	}
}

// sqlc-style code on database/sql publishes with a plain INSERT: what
// sqlc generates for `INSERT INTO outbox.events (topic, payload) VALUES
// ($1, $2) RETURNING sequence, xid`, run as the writer role.
type dbtx interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type queries struct{ db dbtx }

const publishOrder = `-- name: PublishOrder :one
INSERT INTO outbox.events (topic, payload) VALUES ($1, $2) RETURNING sequence, xid::text`

type publishOrderRow struct {
	Sequence int64
	Xid      string
}

func (q *queries) PublishOrder(ctx context.Context, topic string, payload json.RawMessage) (publishOrderRow, error) {
	var r publishOrderRow
	err := q.db.QueryRowContext(ctx, publishOrder, topic, payload).Scan(&r.Sequence, &r.Xid)
	return r, err
}

func TestSQLCStyleCodePublishesWithAPlainInsert(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	sdb := sqlDB(t, db.Writer(t).URL)
	tx, err := sdb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := &queries{db: tx}
	var rows []publishOrderRow
	for i := range 2 {
		r, err := q.PublishOrder(ctx, "order.placed", json.RawMessage(`{"id":`+strconv.Itoa(i)+`}`))
		if err != nil {
			t.Fatalf("PublishOrder as the writer: %v", err)
		}
		rows = append(rows, r)
	}
	var own string
	if err := tx.QueryRowContext(ctx, `SELECT pg_current_xact_id()::text`).Scan(&own); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		if r.Sequence != int64(i+1) || r.Xid != own {
			t.Errorf("row %d: sequence %d xid %s, want %d and the transaction's %s", i, r.Sequence, r.Xid, i+1, own)
		}
	}
}
