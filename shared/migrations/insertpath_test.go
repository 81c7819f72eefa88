package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/passtest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/compensate"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

// The plain INSERT path (migration 0019): INSERT INTO outbox.events
// (topic, payload) by the writer role, the defaults taking the xid before
// they allocate. Each rule of docs/design.md §3 is tested through it here.

// fillPass is one bounded fill pass with no grace, for budget: the proof of
// §3.3 against the writers of these tests.
func fillPass(t *testing.T, pool *pgxpool.Pool, budget time.Duration) *fill.Result {
	t.Helper()
	s := newFill(t, pool, budget)
	ctx, cancel := context.WithTimeout(context.Background(), budget+30*time.Second)
	defer cancel()
	res, err := s.RunOnce(ctx, nil)
	if err != nil {
		t.Fatalf("fill: %v (%+v)", err, res)
	}
	return res
}

// newFill is the fill of fillPass: bounded, no grace, short ticks.
func newFill(t *testing.T, pool *pgxpool.Pool, budget time.Duration) *fill.Service {
	t.Helper()
	return passtest.Fill(t, pool, budget)
}

// report hands compensate one rollback report, as its queue would, and
// returns how many messages it reported failed (deferred, or bad input
// without a DLQ).
func report(t *testing.T, pool *pgxpool.Pool, body string) int {
	t.Helper()
	resp, err := passtest.Compensate(t, pool, compensate.Config{}).Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{
		MessageId: "m1", Body: body, EventSource: "aws:sqs",
		EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:reports",
		Attributes:     map[string]string{"ApproximateReceiveCount": "1"},
	}}})
	if err != nil {
		t.Fatalf("compensate: %v", err)
	}
	return len(resp.BatchItemFailures)
}

func sqlstate(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// anchored is a fresh database whose fill has run once (watermark 1), so
// what a test allocates next is an ordinary cycle's, not the first run's.
func anchored(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	db.Exec(t, `INSERT INTO outbox.events (topic, payload) VALUES ('t', '{}')`)
	if res := fillPass(t, db.Pool, 5*time.Second); res.Watermark != 1 {
		t.Fatalf("anchoring fill: watermark %d, want 1 (%+v)", res.Watermark, res)
	}
	return db
}

// The writer role publishes with INSERTs that name only the payload
// columns, from every shape a client sends: each row gets a sequence from
// the allocator and its transaction's xid.
func TestPlainInsertPublishesAsTheWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name string
		rows int
		send func(tx pgx.Tx) error
	}{
		{"one row, as from psql", 1, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO outbox.events (topic, payload) VALUES ('order.placed', '{"id":1}')`)
			return err
		}},
		{"headers and routing columns", 1, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO outbox.events (topic, payload, headers, aggregate_type, aggregate_id, event_type)
				VALUES ($1, $2, $3, 'order', '1', 'OrderPlaced')`, "order.placed", `{"id":1}`, `{"trace":"x"}`)
			return err
		}},
		{"several rows in one VALUES", 3, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO outbox.events (topic, payload) VALUES ('a', '{"n":1}'), ('a', '{"n":2}'), ('a', '{"n":3}')`)
			return err
		}},
		{"INSERT ... SELECT", 5, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO outbox.events (topic, payload) SELECT 'a', jsonb_build_object('n', g) FROM generate_series(1, 5) g`)
			return err
		}},
		{"COPY of the payload columns", 4, func(tx pgx.Tx) error {
			rows := [][]any{{"a", []byte(`{"n":1}`)}, {"a", []byte(`{"n":2}`)}, {"a", []byte(`{"n":3}`)}, {"a", []byte(`{"n":4}`)}}
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"outbox", "events"}, []string{"topic", "payload"}, pgx.CopyFromRows(rows))
			return err
		}},
		{"a statement prepared once and sent twice, as sqlc's code does", 2, func(tx pgx.Tx) error {
			if _, err := tx.Prepare(ctx, "publish_order", `INSERT INTO outbox.events (topic, payload) VALUES ($1, $2) RETURNING sequence`); err != nil {
				return err
			}
			for i := range 2 {
				var seq int64
				if err := tx.QueryRow(ctx, "publish_order", "order.placed", fmt.Sprintf(`{"id":%d}`, i)).Scan(&seq); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			conn := db.Writer(t).Connect(t)
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.send(tx); err != nil {
				t.Fatalf("as the writer: %v", err)
			}
			xid := testdb.Scalar[string](t, tx, `SELECT pg_current_xact_id()::text`)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			type row struct {
				Sequence int64
				XID      *string
				Topic    *string
			}
			rows, err := db.Pool.Query(ctx, `SELECT sequence, xid::text, topic FROM outbox.events ORDER BY sequence`)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != c.rows {
				t.Fatalf("%d rows, want %d", len(got), c.rows)
			}
			for i, r := range got {
				if r.Sequence != int64(i+1) {
					t.Errorf("row %d has sequence %d, want %d: the allocator hands out 1, 2, ...", i, r.Sequence, i+1)
				}
				if r.XID == nil || *r.XID != xid {
					t.Errorf("row %d has xid %v, want the writer's transaction's %s", r.Sequence, r.XID, xid)
				}
				if r.Topic == nil || *r.Topic == "" {
					t.Errorf("row %d has no topic", r.Sequence)
				}
			}
			if head := testdb.Scalar[int64](t, db.Pool, `SELECT outbox.allocation_head()`); head != int64(c.rows) {
				t.Errorf("allocation head %d, want %d", head, c.rows)
			}
		})
	}
}

// Rule 6 (§3.6) for the INSERT path: what would let a writer hold a
// sequence without its xid, or write a row the defaults did not make, is
// refused by privilege — naming the sequence or the xid in an INSERT or a
// COPY, nextval and setval, and changing the table, its defaults or its
// triggers.
func TestRule6WriterCannotNameTheColumnsTheDefaultsOwn(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	writer := db.Writer(t)
	ctx := context.Background()
	for _, c := range []struct{ name, sql string }{
		{"INSERT naming the sequence", `INSERT INTO outbox.events (sequence, topic, payload) VALUES (100, 't', '{}')`},
		{"INSERT naming the xid", `INSERT INTO outbox.events (xid, topic, payload) VALUES ('1', 't', '{}')`},
		{"INSERT naming recorded_at", `INSERT INTO outbox.events (topic, payload, recorded_at) VALUES ('t', '{}', now() - interval '1 year')`},
		{"INSERT of a placeholder", `INSERT INTO outbox.events (topic, payload, filled_by) VALUES ('t', '{}', 'fill')`},
		{"INSERT ... SELECT naming the sequence", `INSERT INTO outbox.events (sequence, topic, payload) SELECT 101, 't', '{}'`},
		{"UPDATE of an event", `UPDATE outbox.events SET topic = 'x'`},
		{"nextval", `SELECT nextval('outbox.events_sequence_seq')`},
		{"setval", `SELECT setval('outbox.events_sequence_seq', 1000)`},
		{"dropping the sequence's default", `ALTER TABLE outbox.events ALTER COLUMN sequence DROP DEFAULT`},
		{"a BEFORE trigger of its own", `CREATE TRIGGER mine BEFORE INSERT ON outbox.events FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()`},
		{"dropping the placeholders' trigger", `DROP TRIGGER events_placeholder_without_xid ON outbox.events`},
		{"replacing the allocator", `CREATE OR REPLACE FUNCTION outbox.next_sequence() RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'`},
	} {
		t.Run(c.name, func(t *testing.T) {
			refuses(t, writer.Pool, c.name, c.sql)
		})
	}
	t.Run("COPY naming the sequence", func(t *testing.T) {
		_, err := writer.Pool.CopyFrom(ctx, pgx.Identifier{"outbox", "events"}, []string{"sequence", "topic", "payload"},
			pgx.CopyFromRows([][]any{{int64(200), "t", []byte(`{}`)}}))
		refused(t, "COPY (sequence, topic, payload)", err)
	})
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.events`); n != 0 {
		t.Errorf("%d events written by refused statements", n)
	}
	if head := testdb.Scalar[int64](t, db.Pool, `SELECT outbox.allocation_head()`); head != 0 {
		t.Errorf("allocation head %d after refused statements, want 0: a refusal must come before any allocation", head)
	}
}

// allocation is one way a writer can come to hold a sequence in its
// transaction without a row of it committed.
type allocation struct {
	name string
	// allocate runs in the writer's open transaction and leaves it holding
	// a sequence; what it wrote, if anything, is rolled back with a
	// savepoint or never existed.
	allocate func(ctx context.Context, tx pgx.Tx) error
}

// ways are every way the writer role has to obtain a sequence, the hidden
// ones included: each leaves the sequence allocated and no row of it.
var ways = []allocation{
	{"a plain INSERT in a savepoint rolled back", func(ctx context.Context, tx pgx.Tx) error {
		return inSavepointRolledBack(ctx, tx, `INSERT INTO outbox.events (topic, payload) VALUES ('t', '{}')`)
	}},
	{"INSERT ... SELECT of several rows in a savepoint rolled back", func(ctx context.Context, tx pgx.Tx) error {
		return inSavepointRolledBack(ctx, tx, `INSERT INTO outbox.events (topic, payload) SELECT 't', '{}' FROM generate_series(1, 3)`)
	}},
	{"COPY in a savepoint rolled back", func(ctx context.Context, tx pgx.Tx) error {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := sp.CopyFrom(ctx, pgx.Identifier{"outbox", "events"}, []string{"topic", "payload"},
			pgx.CopyFromRows([][]any{{"t", []byte(`{}`)}, {"t", []byte(`{}`)}})); err != nil {
			return err
		}
		return sp.Rollback(ctx)
	}},
	{"the allocator called directly", func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT outbox.next_sequence()`)
		return err
	}},
	{"the allocator in a CTE", func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `WITH s AS (SELECT outbox.next_sequence() AS s) SELECT s FROM s`)
		return err
	}},
	{"the allocator through a cursor", func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DECLARE c CURSOR FOR SELECT outbox.next_sequence() FROM generate_series(1, 10)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `FETCH 2 FROM c`)
		return err
	}},
	{"an INSERT inside a plpgsql block whose exception undid it", func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DO $$ BEGIN
				INSERT INTO outbox.events (topic, payload) VALUES ('t', '{}');
				RAISE EXCEPTION 'undo';
			EXCEPTION WHEN raise_exception THEN NULL;
			END $$`)
		return err
	}},
	{"the default of a table of its own", func(ctx context.Context, tx pgx.Tx) error {
		// A writer that may create tables copies the events table's
		// defaults: it still allocates through the allocator.
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE mine (LIKE outbox.events INCLUDING DEFAULTS) ON COMMIT DROP`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO mine (topic, payload) VALUES ('t', '{}')`)
		return err
	}},
}

func inSavepointRolledBack(ctx context.Context, tx pgx.Tx, sql string) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := sp.Exec(ctx, sql); err != nil {
		return err
	}
	return sp.Rollback(ctx)
}

// TestRule1NoWriterAllocatesBeforeItsXID is §3.1 for the INSERT path,
// against the hidden kind of breaker: whatever way the writer role comes
// to hold a sequence — a plain INSERT, COPY, the allocator called
// directly, in a CTE or a cursor, an insert undone by a savepoint or an
// exception block, a table of its own with the same default — its
// transaction holds an xid from that moment, in READ COMMITTED and
// REPEATABLE READ alike. So a fill marker taken while it is open is newer
// than it: the proof waits, the sequence is not filled while the writer
// runs, and is filled once it has ended.
//
// Not parallel: the fill's proof reads the cluster-wide xmin horizon.
func TestRule1NoWriterAllocatesBeforeItsXID(t *testing.T) {
	ctx := context.Background()
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		for _, w := range ways {
			t.Run(string(iso)+"/"+w.name, func(t *testing.T) {
				db := anchored(t)
				writer := db.Writer(t)
				db.Exec(t, `GRANT TEMP ON DATABASE `+pgx.Identifier{db.Name}.Sanitize()+` TO `+pgx.Identifier{writer.Name}.Sanitize())
				conn := writer.Connect(t)
				tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx) //nolint:errcheck
				if assigned := testdb.Scalar[*string](t, tx, `SELECT pg_current_xact_id_if_assigned()::text`); assigned != nil {
					t.Fatalf("the writer's transaction has xid %s before it allocates; the test needs one without", *assigned)
				}
				if err := w.allocate(ctx, tx); err != nil {
					t.Fatalf("%s as the writer: %v", w.name, err)
				}
				held := testdb.Scalar[int64](t, db.Pool, `SELECT outbox.allocation_head()`)
				if held < 2 {
					t.Fatalf("allocation head %d: nothing was allocated", held)
				}
				if assigned := testdb.Scalar[*string](t, tx, `SELECT pg_current_xact_id_if_assigned()::text`); assigned == nil {
					t.Errorf("the writer holds sequences up to %d and no xid", held)
				}
				// A later writer commits above it, so the held sequences are a gap.
				db.Exec(t, `INSERT INTO outbox.events (topic, payload) VALUES ('later', '{}')`)

				res := fillPass(t, db.Pool, 1500*time.Millisecond)
				if res.Filled != 0 {
					t.Errorf("while the writer runs the fill filled %d (%+v): a placeholder took a sequence its writer may still commit", res.Filled, res)
				}
				if got := res.WaitingFor(); got != fill.WaitingProof && got != fill.WaitingBudget {
					t.Errorf("while the writer runs the fill waits for %q, want the proof", got)
				}

				if err := tx.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
				res = fillPass(t, db.Pool, 20*time.Second)
				if res.Filled != held-1 {
					t.Errorf("after the writer ended the fill filled %d, want %d (2..%d): %+v", res.Filled, held-1, held, res)
				}
			})
		}
	}
}

// The control of TestRule1NoWriterAllocatesBeforeItsXID: a role that may
// call nextval (the owner) and does so in a transaction without an xid is
// the break the allocator prevents — the fill proves its sequence
// abandoned while it still runs.
func TestRule1ControlNextvalWithoutXIDIsFilledUnderTheWriter(t *testing.T) {
	ctx := context.Background()
	db := anchored(t)
	owner := db.Connect(t)
	tx, err := owner.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	held := testdb.Scalar[int64](t, tx, `SELECT nextval('outbox.events_sequence_seq')`)
	db.Exec(t, `INSERT INTO outbox.events (topic, payload) VALUES ('later', '{}')`)
	res := fillPass(t, db.Pool, 20*time.Second)
	if res.Filled != 1 {
		t.Fatalf("the fill filled %d, want the held %d filled under its live writer (without the break there is nothing to prevent)", res.Filled, held)
	}
	_, err = tx.Exec(ctx, `INSERT INTO outbox.events (sequence, topic, payload) VALUES ($1, 't', '{}')`, held)
	if sqlstate(err) != "23505" {
		t.Errorf("the late insert: %v, want a duplicate key", err)
	}
}

// Rules 2 and 3 (§3.2, §3.3) for the INSERT path: the fill's marker is
// taken after the head that covers a plain INSERT's sequence, so it is
// newer than the inserting transaction, and the proof waits for it; the
// row it commits is never filled over.
func TestRules2And3MarkerIsNewerThanAnOpenInsertWriter(t *testing.T) {
	ctx := context.Background()
	db := anchored(t)
	conn := db.Writer(t).Connect(t)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var seq int64
	var xid string
	if err := tx.QueryRow(ctx, `INSERT INTO outbox.events (topic, payload) VALUES ('slow', '{}') RETURNING sequence, xid::text`).Scan(&seq, &xid); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `INSERT INTO outbox.events (topic, payload) VALUES ('later', '{}')`)

	res := fillPass(t, db.Pool, 1500*time.Millisecond)
	if res.Filled != 0 {
		t.Fatalf("the fill filled %d under an open INSERT writer", res.Filled)
	}
	var markerNewer, headCovers bool
	if err := db.Pool.QueryRow(ctx, `SELECT cycle_marker > $1::xid8, cycle_marker_head >= $2 FROM outbox.fill_state`, xid, seq).Scan(&markerNewer, &headCovers); err != nil {
		t.Fatal(err)
	}
	if !headCovers {
		t.Errorf("the cycle's marker head does not cover the writer's sequence %d", seq)
	}
	if !markerNewer {
		t.Errorf("the cycle's marker is not newer than the writer's xid %s (rule 2)", xid)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res = fillPass(t, db.Pool, 20*time.Second)
	if res.Filled != 0 {
		t.Errorf("after the writer committed the fill filled %d, want 0", res.Filled)
	}
	if topic := testdb.Scalar[*string](t, db.Pool, `SELECT topic FROM outbox.events WHERE sequence = $1`, seq); topic == nil || *topic != "slow" {
		t.Errorf("sequence %d holds topic %v, want the writer's event", seq, topic)
	}
	if res.Watermark < seq+1 {
		t.Errorf("watermark %d, want past %d", res.Watermark, seq+1)
	}
}

// Rule 4 (§3.4) for the INSERT path: the xid an INSERT ... RETURNING xid
// hands back is the one compensate decides on — deferred while the writer
// runs, filled once it rolled back.
func TestRule4AReportCarriesTheInsertsXID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	conn := db.Writer(t).Connect(t)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seq int64
	var xid string
	if err := tx.QueryRow(ctx, `INSERT INTO outbox.events (topic, payload) VALUES ('t', '{}') RETURNING sequence, xid::text`).Scan(&seq, &xid); err != nil {
		t.Fatal(err)
	}
	if own := testdb.Scalar[string](t, tx, `SELECT pg_current_xact_id()::text`); own != xid {
		t.Errorf("the row's xid %s is not its transaction's %s", xid, own)
	}
	body := fmt.Sprintf(`{"v":1,"xid":%q,"sequences":[%d]}`, xid, seq)
	if failed := report(t, db.Pool, body); failed != 1 {
		t.Errorf("a report of the running writer: %d failed messages, want 1 (deferred)", failed)
	}
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.events WHERE sequence = $1`, seq); n != 0 {
		t.Errorf("compensate filled %d while its writer runs", seq)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if failed := report(t, db.Pool, body); failed != 0 {
		t.Errorf("a report of the rolled-back writer: %d failed messages, want 0", failed)
	}
	if by := testdb.Scalar[*string](t, db.Pool, `SELECT filled_by FROM outbox.events WHERE sequence = $1`, seq); by == nil || *by != "compensate" {
		t.Errorf("sequence %d filled_by %v, want compensate", seq, by)
	}
}

// Rule 5 (§3.5) for the INSERT path: a placeholder never replaces a row a
// plain INSERT committed, and a reported sequence above the head (never
// allocated) is not filled.
func TestRule5PlaceholdersNeverOverwriteAnInsertedEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	writer := db.Writer(t)
	seq := testdb.Scalar[int64](t, writer.Pool, `INSERT INTO outbox.events (topic, payload) VALUES ('kept', '{"a":1}') RETURNING sequence`)
	w, err := store.NewEvents(store.MustSchema("outbox")).InsertPlaceholders(ctx, db.Maintainer(t).Pool, []int64{seq}, store.FilledByCompensate)
	if err != nil {
		t.Fatal(err)
	}
	if w.N != 0 {
		t.Errorf("the placeholder insert wrote %d rows over the event %d", w.N, seq)
	}
	if topic := testdb.Scalar[*string](t, db.Pool, `SELECT topic FROM outbox.events WHERE sequence = $1`, seq); topic == nil || *topic != "kept" {
		t.Errorf("sequence %d holds %v after the placeholder insert, want the event", seq, topic)
	}
	_ = report(t, db.Pool, fmt.Sprintf(`{"v":1,"sequences":[%d]}`, seq+5))
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.events WHERE sequence > $1`, seq); n != 0 {
		t.Errorf("a report above the head wrote %d rows", n)
	}
}

// Rule 7 (§3.7) for the INSERT path: a persisted marker that is not this
// cluster's is discarded, and the gap a plain INSERT's rollback left is
// filled under a fresh one.
func TestRule7AForeignMarkerDoesNotHoldAnInsertWritersGap(t *testing.T) {
	ctx := context.Background()
	db := anchored(t)
	writer := db.Writer(t)
	conn := writer.Connect(t)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gap := testdb.Scalar[int64](t, tx, `INSERT INTO outbox.events (topic, payload) VALUES ('t', '{}') RETURNING sequence`)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	top := testdb.Scalar[int64](t, writer.Pool, `INSERT INTO outbox.events (topic, payload) VALUES ('t', '{}') RETURNING sequence`)
	db.Exec(t, `UPDATE outbox.fill_state SET cycle_from = $1, cycle_first_seen_at = now() - interval '1 hour',
		cycle_marker = (pg_snapshot_xmax(pg_current_snapshot())::text::bigint + 1000000000)::text::xid8,
		cycle_marker_head = $2`, gap, top)
	res := fillPass(t, db.Pool, 20*time.Second)
	if res.ForeignMarkers != 1 {
		t.Errorf("ForeignMarkers = %d, want 1", res.ForeignMarkers)
	}
	if res.Filled != 1 {
		t.Errorf("Filled = %d, want the gap %d filled under a fresh marker: %+v", res.Filled, gap, res)
	}
}

// A placeholder carries no xid though the placeholder inserts do not name
// it (the trigger clears the default's); one given an xid explicitly is
// still refused by the table's CHECK.
func TestPlaceholdersKeepNoXID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	db.Exec(t, `SELECT outbox.next_sequence()`)
	db.Exec(t, `SELECT outbox.next_sequence()`)
	if _, err := store.NewEvents(store.MustSchema("outbox")).InsertPlaceholders(ctx, db.Maintainer(t).Pool, []int64{1}, store.FilledByFill); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `INSERT INTO outbox.events (sequence, filled_by) VALUES (2, 'operator')`)
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.events WHERE xid IS NOT NULL`); n != 0 {
		t.Errorf("%d placeholders carry an xid", n)
	}
	_, err := db.Pool.Exec(ctx, `INSERT INTO outbox.events (sequence, xid, filled_by) VALUES (3, '5', 'fill')`)
	if sqlstate(err) != "23514" {
		t.Errorf("a placeholder given an xid: %v, want the CHECK's refusal (23514)", err)
	}
}

// The publish notification (§2) covers the INSERT path: once per
// committing transaction, whatever mix of INSERTs, COPY and publish() it
// sent, with its first and last sequence; nothing for one that rolled
// back.
func TestPublishNotificationCoversPlainInserts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	db.Exec(t, `SELECT outbox.set_publish_notifications(true)`)
	listener := db.Connect(t)
	if _, err := listener.Exec(ctx, `LISTEN outbox_events`); err != nil {
		t.Fatal(err)
	}
	conn := db.Writer(t).Connect(t)
	within := func(fn func(tx pgx.Tx) error, commit bool) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := fn(tx); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	within(func(tx pgx.Tx) error { // 1, 2, 3
		_, err := tx.Exec(ctx, `INSERT INTO outbox.events (topic, payload) SELECT 't', '{}' FROM generate_series(1, 3)`)
		return err
	}, true)
	within(func(tx pgx.Tx) error { // 4 rolled back
		_, err := tx.Exec(ctx, `INSERT INTO outbox.events (topic, payload) VALUES ('t', '{}')`)
		return err
	}, false)
	within(func(tx pgx.Tx) error { // 5 (a savepoint rolled back), 6, 7 by COPY, 8 by publish()
		if err := inSavepointRolledBack(ctx, tx, `INSERT INTO outbox.events (topic, payload) VALUES ('t', '{}')`); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"outbox", "events"}, []string{"topic", "payload"},
			pgx.CopyFromRows([][]any{{"t", []byte(`{}`)}, {"t", []byte(`{}`)}})); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT outbox.publish('t', '{}')`)
		return err
	}, true)
	var got []string
	for {
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		n, err := listener.WaitForNotification(wctx)
		cancel()
		if err != nil {
			break
		}
		got = append(got, n.Payload)
	}
	if want := []string{`{"min":1,"max":3}`, `{"min":6,"max":8}`}; !slices.Equal(got, want) {
		t.Errorf("notifications %q, want %q", got, want)
	}
}

// The allocator and the defaults ignore the caller's search_path, as
// publish does (0013): a writer that plants a function, an operator or a
// type for every name they use and puts its schema first gets none of them
// run as the owner, and the event is written with its xid.
func TestPlainInsertIgnoresTheCallersSearchPath(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	writer := db.Writer(t)
	ctx := context.Background()
	conn := plantSchema(t, db, writer,
		`CREATE FUNCTION planted.next_sequence() RETURNS bigint LANGUAGE sql
			AS $$ SELECT planted.ran('next_sequence')::bigint $$`,
		`CREATE FUNCTION planted.eq(pg_catalog.xid8, pg_catalog.xid8) RETURNS boolean LANGUAGE sql
			AS $$ SELECT planted.ran('=') IS NULL $$`,
		`CREATE OPERATOR planted.= (LEFTARG = pg_catalog.xid8, RIGHTARG = pg_catalog.xid8, FUNCTION = planted.eq)`,
		`CREATE DOMAIN planted.xid8 AS pg_catalog.xid8 CHECK (planted.ran('xid8') IS NULL)`,
		`CREATE DOMAIN planted.regclass AS pg_catalog.regclass CHECK (planted.ran('regclass') IS NULL)`)
	var seq int64
	var xid, own string
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL search_path = planted, pg_catalog`); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO outbox.events (topic, payload) VALUES ('t', '{}') RETURNING sequence, xid::text`).Scan(&seq, &xid); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT pg_catalog.pg_current_xact_id()::text`).Scan(&own)
	})
	if err != nil {
		t.Fatalf("INSERT with the planted search_path: %v", err)
	}
	if seq != 1 || xid != own {
		t.Errorf("the event has sequence %d and xid %s, want 1 and the writer's %s", seq, xid, own)
	}
}

// publish takes the routing columns by name, and read_events returns them
// after its seven columns of before.
func TestPublishTakesRoutingColumnsAndReadEventsReturnsThem(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	writer := db.Writer(t)
	testdb.Exec(t, writer.Pool, `SELECT outbox.publish('order.placed', '{"id":7}', aggregate_type => 'order', aggregate_id => '7', event_type => 'OrderPlaced')`)
	testdb.Exec(t, writer.Pool, `SELECT outbox.publish('order.placed', '{"id":8}')`)
	testdb.Exec(t, writer.Pool, `SELECT outbox.publish('order.placed', '{"id":9}', '{"h":1}')`)
	type routed struct {
		Sequence                          int64
		AggregateType, AggregateID, Event *string
	}
	rows, err := writer.Pool.Query(context.Background(), `SELECT sequence, aggregate_type, aggregate_id, event_type FROM outbox.read_events(0, 10)`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[routed])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("read %d events, want 3", len(got))
	}
	if r := got[0]; r.AggregateType == nil || *r.AggregateType != "order" || r.AggregateID == nil || *r.AggregateID != "7" || r.Event == nil || *r.Event != "OrderPlaced" {
		t.Errorf("event 1 routing %+v, want order/7/OrderPlaced", r)
	}
	if r := got[1]; r.AggregateType != nil || r.AggregateID != nil || r.Event != nil {
		t.Errorf("event 2 routing %+v, want none", r)
	}
	names := testdb.Column[string](t, db.Pool, `SELECT unnest(proargnames) FROM pg_proc WHERE oid = 'outbox.read_events(bigint, integer)'::regprocedure`)
	want := []string{"after", "max", "sequence", "xid", "topic", "payload", "headers", "recorded_at", "filled_by", "aggregate_type", "aggregate_id", "event_type"}
	if !slices.Equal(names, want) {
		t.Errorf("read_events' arguments and columns %v, want %v", names, want)
	}
}

// 0019 drops and re-creates publish and read_events (a new signature, a
// new result type): the grants a DBA made on them by hand survive it, as
// do the writers' and the functions' own.
func TestMigrationKeepsTheGrantsOfTheFunctionsItReplaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	const schema = "regrant"
	conn := db.Connect(t)
	applyBefore(t, conn, schema, 19)
	reader := db.NewRole(t)
	writer := db.NewRole(t)
	testdb.Exec(t, conn, `SELECT regrant.grant_writer($1)`, writer.Name)
	testdb.Exec(t, conn, `GRANT USAGE ON SCHEMA regrant TO `+pgx.Identifier{reader.Name}.Sanitize())
	testdb.Exec(t, conn, `GRANT SELECT ON regrant.events, regrant.fill_state TO `+pgx.Identifier{reader.Name}.Sanitize())
	testdb.Exec(t, conn, `GRANT EXECUTE ON FUNCTION regrant.read_events(bigint, integer), regrant.publish(text, jsonb, jsonb) TO `+pgx.Identifier{reader.Name}.Sanitize())

	if _, err := migrate.Apply(ctx, conn, schema); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*testdb.Role{reader, writer} {
		for _, sql := range []string{`SELECT count(*) FROM regrant.read_events(0, 10)`, `SELECT regrant.publish('t', '{}')`} {
			if _, err := r.Pool.Exec(ctx, sql); err != nil {
				t.Errorf("%s after 0019: %v", sql, err)
			}
		}
	}
	if _, err := writer.Pool.Exec(ctx, `INSERT INTO regrant.events (topic, payload) VALUES ('t', '{}')`); err != nil {
		t.Errorf("the writer's plain INSERT after 0019: %v", err)
	}
	var public bool
	if err := conn.QueryRow(ctx, `SELECT has_function_privilege('public', 'regrant.read_events(bigint, integer)', 'EXECUTE')
		OR has_function_privilege('public', 'regrant.publish(text, jsonb, jsonb, text, text, text)', 'EXECUTE')
		OR has_function_privilege('public', 'regrant.next_sequence()', 'EXECUTE')`).Scan(&public); err != nil || public {
		t.Errorf("a function of 0019 is executable by PUBLIC (%v)", err)
	}
}
