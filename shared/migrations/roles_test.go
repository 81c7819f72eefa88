package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/passtest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/compensate"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// refused asserts that err is PostgreSQL's insufficient_privilege.
func refused(t *testing.T, what string, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("%s: got %v, want permission denied (42501)", what, err)
	}
}

// refuses asserts that q refuses sql (with args) as insufficient_privilege.
func refuses(t *testing.T, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, what, sql string, args ...any) {
	t.Helper()
	_, err := q.Exec(context.Background(), sql, args...)
	refused(t, what, err)
}

// The application's role publishes (SQL and Go), reads, and drives
// deliveries through shared/outbox; it can neither allocate a sequence nor
// write events, nor touch what the sweep owns, nor grant itself more.
func TestWriterRole(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	writer := db.Writer(t)
	ctx := context.Background()
	ob, err := outbox.New(writer.Pool, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}

	var seq int64
	if err := writer.Pool.QueryRow(ctx, `SELECT outbox.publish('t', '{"a":1}')`).Scan(&seq); err != nil {
		t.Errorf("publish(): %v", err)
	}
	if err := ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
		_, err := tx.Publish(ctx, "t", map[string]int{"b": 2}, map[string]int{"c": 3})
		return err
	}); err != nil {
		t.Errorf("Go Publish: %v", err)
	}
	if head, err := ob.Head(ctx); err != nil || head != 3 {
		t.Errorf("Head = %d, %v; want 3", head, err)
	}
	got, err := ob.ReadContiguous(ctx, 0, 10)
	if err != nil {
		t.Errorf("ReadContiguous: %v", err)
	}
	if len(got) != 3 {
		t.Errorf("read %d events, want the 3 published", len(got))
	}
	var xid *string
	if err := db.Pool.QueryRow(ctx, `SELECT xid::text FROM outbox.events WHERE sequence = $1`, seq).Scan(&xid); err != nil || xid == nil {
		t.Errorf("the event publish() wrote has xid %v (%v), want the writer's", xid, err)
	}

	refuses(t, writer.Pool, "nextval", `SELECT nextval('outbox.events_sequence_seq')`)
	refuses(t, writer.Pool, "setval", `SELECT setval('outbox.events_sequence_seq', 100)`)
	refuses(t, writer.Pool, "insert an event", `INSERT INTO outbox.events (sequence, xid, topic, payload) VALUES (1000, pg_current_xact_id(), 't', '{}')`)
	refuses(t, writer.Pool, "insert a placeholder", `INSERT INTO outbox.events (sequence, filled_by) VALUES (1001, 'fill')`)
	refuses(t, writer.Pool, "alter the sequence", `ALTER SEQUENCE outbox.events_sequence_seq CACHE 1`)
	refuses(t, writer.Pool, "grant itself the maintainer's privileges", `SELECT outbox.grant_maintainer($1)`, writer.Name)

	// Deliveries through shared/outbox's statements.
	id, err := ob.Enqueue(ctx, nil, outbox.NewDelivery{Recipient: "billing", Kind: "invoice", Payload: []byte("x")})
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	tx, err := writer.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := ob.ClaimPending(ctx, tx, 10)
	if err != nil {
		t.Errorf("ClaimPending: %v", err)
	}
	if len(claimed) != 1 {
		t.Errorf("claimed %d deliveries, want 1", len(claimed))
	}
	if err := ob.MarkDelivered(ctx, tx, id); err != nil {
		t.Errorf("MarkDelivered: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ob.Ack(ctx, nil, id); err != nil {
		t.Errorf("Ack: %v", err)
	}
	refuses(t, writer.Pool, "reset redeliveries", `UPDATE outbox.deliveries SET redeliveries = 0`)
	refuses(t, writer.Pool, "delete deliveries", `DELETE FROM outbox.deliveries`)
}

// The application's consumers read with read_events and keep their
// position with commit_position; they cannot move a position by hand (it
// could go back, and retention relies on it only growing), nor delete
// events.
func TestWriterRoleConsumes(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	writer := db.Writer(t)
	ctx := context.Background()
	db.Exec(t, `SELECT outbox.publish('t', '{}'), outbox.publish('t', '{}')`)
	var read int
	if err := writer.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox.read_events(0, 10)`).Scan(&read); err != nil {
		t.Errorf("read_events as the writer: %v", err)
	}
	if read != 2 {
		t.Errorf("read_events returned %d rows, want the 2 published", read)
	}
	var stored int64
	if err := writer.Pool.QueryRow(ctx, `SELECT outbox.commit_position('ledger', 2)`).Scan(&stored); err != nil {
		t.Errorf("commit_position as the writer: %v", err)
	}
	if stored != 2 {
		t.Errorf("commit_position stored %d, want 2", stored)
	}
	refuses(t, writer.Pool, "move a position by hand", `UPDATE outbox.consumers SET position = 0`)
	refuses(t, writer.Pool, "delete events", `DELETE FROM outbox.events`)
	refuses(t, writer.Pool, "read the fill's lease", `SELECT owner FROM outbox.leases`)
}

// A role the grant functions did not set up cannot move a consumer's
// position, even with USAGE on the schema: commit_position runs as the
// owner, so it is not executable by PUBLIC.
func TestCommitPositionIsNotPublic(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	other := db.NewRole(t)
	db.Exec(t, `GRANT USAGE ON SCHEMA outbox TO `+pgx.Identifier{other.Name}.Sanitize())
	refuses(t, other.Pool, "commit_position by a role not set up", `SELECT outbox.commit_position('ledger', 0)`)
}

// Every function of ours is executable only by the roles the grant
// functions set up (a trigger function is not called, it fires): none is
// left to PUBLIC's default EXECUTE, SECURITY INVOKER or not.
func TestNoFunctionIsExecutableByPublic(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	public := testdb.Column[string](t, db.Pool, `SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc AS p
		WHERE p.pronamespace = 'outbox'::regnamespace AND p.prorettype <> 'pg_catalog.trigger'::regtype
		  AND has_function_privilege('public', p.oid, 'EXECUTE')
		ORDER BY 1`)
	if len(public) > 0 {
		t.Errorf("executable by PUBLIC: %v", public)
	}
	writer := db.Writer(t)
	for _, call := range []string{`SELECT * FROM outbox.sweep_reset(0, 1, 0)`, `SELECT * FROM outbox.present_after(0, 1)`,
		`SELECT * FROM outbox.prune_deliveries(0, 1, 0, 0, 0)`, `SELECT * FROM outbox.prune_events(0, 1, 0)`} {
		refuses(t, writer.Pool, "the writer: "+call, call)
	}
}

// The functions' role runs every pass and the init's version check; it
// cannot allocate a sequence, publish, or write a real event.
func TestMaintainerRunsEveryFunction(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	m := db.Maintainer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if err := migrate.Check(ctx, m.Pool, "outbox"); err != nil {
		t.Errorf("version check as the maintainer: %v", err)
	}

	everyPassDoesItsWork(t, ctx, db, m.Pool)

	// The relay is a consumer: it reads with read_events and moves its
	// position forward with commit_position, never by hand (a direct
	// UPDATE could move it back, and retention relies on it only growing).
	if n := testdb.Scalar[int64](t, m.Pool, `SELECT count(*) FROM outbox.read_events(0, 10)`); n < 1 {
		t.Errorf("read_events as the maintainer returned %d rows, want the passes' events", n)
	}
	if stored := testdb.Scalar[int64](t, m.Pool, `SELECT outbox.commit_position('relay:default', 1)`); stored != 1 {
		t.Errorf("commit_position as the maintainer stored %d, want 1", stored)
	}
	refuses(t, m.Pool, "maintainer moves a position by hand", `UPDATE outbox.consumers SET position = 0`)
	refuses(t, m.Pool, "maintainer nextval", `SELECT nextval('outbox.events_sequence_seq')`)
	refuses(t, m.Pool, "maintainer publish", `SELECT outbox.publish('t', '{}')`)
	refuses(t, m.Pool, "maintainer inserts a real event", `INSERT INTO outbox.events (sequence, topic, payload) VALUES (9999, 't', '{}')`)
}

// TestRule6WriterRoleCannotBreakRule1 is docs/design.md §3.6. A writer that
// calls nextval itself and inserts later holds its sequence without an
// xid: a fill pass in between proves it abandoned while it still runs,
// fills it, and the writer's insert fails with a duplicate key — in READ
// COMMITTED and REPEATABLE READ alike. The schema's owner (what a role
// granted more than grant_writer is) shows the break is real; the writer
// role cannot even begin it.
//
// Not parallel: the fill's proof reads the cluster-wide xmin horizon, and
// this package's other tests hold xids.
func TestRule6WriterRoleCannotBreakRule1(t *testing.T) {
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		t.Run(string(iso), func(t *testing.T) {
			db := testdb.New(t)
			writer := db.Writer(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			db.Exec(t, `SELECT outbox.publish('t', '{}')`)
			fs := passtest.Fill(t, db.Pool, 20*time.Second)
			passtest.Run(t, ctx, fs) // anchors the watermark at 1

			// The break, by a role that may nextval.
			owner := db.Connect(t)
			tx, err := owner.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
			if err != nil {
				t.Fatal(err)
			}
			held := testdb.Scalar[int64](t, tx, `SELECT nextval('outbox.events_sequence_seq')`)
			if _, err := db.Pool.Exec(ctx, `SELECT outbox.publish('t', '{}')`); err != nil { // a later writer commits
				t.Fatal(err)
			}
			fr, err := fs.RunOnce(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, insertErr := tx.Exec(ctx, `INSERT INTO outbox.events (sequence, xid, topic, payload) VALUES ($1, pg_current_xact_id(), 't', '{}')`, held)
			_ = tx.Rollback(ctx)
			var pgErr *pgconn.PgError
			if fr.Filled != 1 || !errors.As(insertErr, &pgErr) || pgErr.Code != "23505" {
				t.Fatalf("control: the fill filled %d and the late insert got %v; want the held sequence %d filled and 23505 "+
					"(without the break there is nothing for the role to prevent)", fr.Filled, insertErr, held)
			}

			// The same writer as the writer role.
			wconn := writer.Connect(t)
			wtx, err := wconn.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
			if err != nil {
				t.Fatal(err)
			}
			refuses(t, wtx, "the writer role's nextval", `SELECT nextval('outbox.events_sequence_seq')`)
			_ = wtx.Rollback(ctx)
			refuses(t, wconn, "the writer role's direct insert", `INSERT INTO outbox.events (sequence, xid, topic, payload) VALUES ($1, pg_current_xact_id(), 't', '{}')`, held+100)
		})
	}
}

// The roles set up before a later migration extends a grant function get
// its new privileges from regrant_roles(), and a dropped role is skipped.
func TestRegrantRolesRenewsEveryRecordedRole(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	writer, maint := db.Writer(t), db.Maintainer(t)
	gone := db.Writer(t)
	db.Exec(t, `REVOKE SELECT ON outbox.events FROM `+pgx.Identifier{writer.Name}.Sanitize())
	db.Exec(t, `REVOKE SELECT ON outbox.fill_state FROM `+pgx.Identifier{maint.Name}.Sanitize())
	gone.Pool.Close()
	db.Exec(t, `DROP OWNED BY `+pgx.Identifier{gone.Name}.Sanitize()+`; DROP ROLE `+pgx.Identifier{gone.Name}.Sanitize())
	n := testdb.Scalar[int](t, db.Pool, `SELECT outbox.regrant_roles()`)
	if n != 2 {
		t.Errorf("regrant_roles() = %d, want 2 (the dropped role skipped)", n)
	}
	if _, err := writer.Pool.Exec(ctx, `SELECT count(*) FROM outbox.events`); err != nil {
		t.Errorf("writer after regrant: %v", err)
	}
	if _, err := maint.Pool.Exec(ctx, `SELECT count(*) FROM outbox.fill_state`); err != nil {
		t.Errorf("maintainer after regrant: %v", err)
	}
}

// publish and publish_batch run as the schema's owner (SECURITY DEFINER)
// with no search_path of their own (0013): a writer that plants a
// function, an operator or a type under every name their bodies and the
// notification trigger use, and puts its schema first on the path, gets
// none of them run as the owner. Each planted object raises, so one that
// ran fails the publish; the events are written with the writer's xid.
func TestPublishIgnoresTheCallersSearchPath(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	writer := db.Writer(t)
	ctx := context.Background()
	db.Exec(t, `SELECT outbox.set_publish_notifications(true)`)
	conn := plantSchema(t, db, writer,
		`CREATE FUNCTION planted.pg_notify(pg_catalog.text, pg_catalog.text) RETURNS void LANGUAGE sql
			AS $$ SELECT planted.ran('pg_notify')::pg_catalog.text; $$`,
		`CREATE FUNCTION planted.current_setting(pg_catalog.text, boolean) RETURNS pg_catalog.text LANGUAGE sql
			AS $$ SELECT planted.ran('current_setting') $$`,
		`CREATE FUNCTION planted.set_config(pg_catalog.text, pg_catalog.text, boolean) RETURNS pg_catalog.text LANGUAGE sql
			AS $$ SELECT planted.ran('set_config') $$`,
		`CREATE FUNCTION planted.cat(pg_catalog.text, pg_catalog.text) RETURNS pg_catalog.text LANGUAGE sql
			AS $$ SELECT planted.ran('||') $$`,
		`CREATE FUNCTION planted.cat(pg_catalog.text, bigint) RETURNS pg_catalog.text LANGUAGE sql
			AS $$ SELECT planted.ran('||') $$`,
		`CREATE OPERATOR planted.|| (LEFTARG = pg_catalog.text, RIGHTARG = pg_catalog.text, FUNCTION = planted.cat)`,
		`CREATE OPERATOR planted.|| (LEFTARG = pg_catalog.text, RIGHTARG = bigint, FUNCTION = planted.cat)`,
		`CREATE DOMAIN planted.jsonb AS pg_catalog.jsonb CHECK (planted.ran('jsonb') IS NULL)`,
		`CREATE DOMAIN planted.xid8 AS pg_catalog.xid8 CHECK (planted.ran('xid8') IS NULL)`,
		`CREATE DOMAIN planted.text AS pg_catalog.text CHECK (planted.ran('text') IS NULL)`)
	for name, sql := range map[string]string{
		"publish":       `SELECT outbox.publish('t', '{"a":1}')`,
		"publish_batch": `SELECT pg_catalog.max(s) FROM outbox.publish_batch('t', ARRAY['{"b":2}'::pg_catalog.jsonb, '{"c":3}']) s`,
	} {
		var seq int64
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			// Planted first, pg_catalog after it: what the caller of a
			// SECURITY DEFINER function can do to one that names things
			// unqualified.
			if _, err := tx.Exec(ctx, `SET LOCAL search_path = planted, pg_catalog`); err != nil {
				return err
			}
			return tx.QueryRow(ctx, sql).Scan(&seq)
		})
		if err != nil {
			t.Errorf("%s with the planted search_path: %v", name, err)
			continue
		}
		var xid *string
		if err := db.Pool.QueryRow(ctx, `SELECT xid::text FROM outbox.events WHERE sequence = $1`, seq).Scan(&xid); err != nil || xid == nil {
			t.Errorf("%s: event %d has xid %v (%v), want the writer's", name, seq, xid, err)
		}
	}
}

// rolledBackPublish publishes one event in a transaction it rolls back,
// and returns the sequence it burned and the writer's xid.
func rolledBackPublish(t *testing.T, db *testdb.DB) (int64, string) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seq int64
	var xid string
	if err := tx.QueryRow(ctx, `SELECT outbox.publish('t', '{}'), pg_current_xact_id()::text`).Scan(&seq, &xid); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	return seq, xid
}

// everyPassDoesItsWork runs fill, compensate, sweep and prune on pool,
// each on work set up for it with the owner's db.Pool, and checks each did
// it: the maintainer role's test, and the planted-operator test's.
func everyPassDoesItsWork(t *testing.T, ctx context.Context, db *testdb.DB, pool *pgxpool.Pool) {
	t.Helper()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// fill: 1 committed, 2 rolled back, 3 committed.
	exec(`SELECT outbox.publish('t', '{}')`)
	rolledBackPublish(t, db)
	exec(`SELECT outbox.publish('t', '{}')`)
	fr := passtest.Run(t, ctx, passtest.Fill(t, pool, 20*time.Second))
	if fr.Filled != 1 {
		t.Errorf("fill: Filled = %d, want 1 (result %+v)", fr.Filled, fr)
	}

	// compensate: a reported rollback of a finished writer.
	reported, reportedXID := rolledBackPublish(t, db)
	resp, err := passtest.Compensate(t, pool, compensate.Config{}).Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{{
		MessageId:      "m1",
		Body:           fmt.Sprintf(`{"v":1,"xid":%q,"sequences":[%d]}`, reportedXID, reported),
		EventSource:    "aws:sqs",
		EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:reports",
		Attributes:     map[string]string{"ApproximateReceiveCount": "1"},
	}}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Errorf("compensate: %v, failures %v", err, resp.BatchItemFailures)
	}
	var by string
	if err := db.Pool.QueryRow(ctx, `SELECT filled_by FROM outbox.events WHERE sequence = $1`, reported).Scan(&by); err != nil || by != "compensate" {
		t.Errorf("reported sequence %d: filled_by %q (%v), want compensate", reported, by, err)
	}

	// sweep: one stuck delivery goes back to pending, one past its
	// redeliveries becomes dead.
	var stuck, dying int64
	if err := db.Pool.QueryRow(ctx, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, delivered_at)
		VALUES ('r', 'k', '', 'delivered', 1, now() - interval '2 minutes') RETURNING id`).Scan(&stuck); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, redeliveries, delivered_at)
		VALUES ('r', 'k', '', 'delivered', 11, 10, now() - interval '2 minutes') RETURNING id`).Scan(&dying); err != nil {
		t.Fatal(err)
	}
	sr := passtest.Run(t, ctx, passtest.Sweep(t, pool, sweep.Config{}))
	if sr.Reset != 1 {
		t.Errorf("sweep: Reset = %d, want 1", sr.Reset)
	}
	if sr.Dead != 1 {
		t.Errorf("sweep: Dead = %d, want 1", sr.Dead)
	}

	// prune: the acked delivery and the events at or below the watermark
	// (the fill has filled the gap, so 1..3 are contiguous).
	exec(`UPDATE outbox.deliveries SET state = 'acked', created_at = now() - interval '2 days', acked_at = now() - interval '2 days' WHERE id = $1`, stuck)
	exec(`UPDATE outbox.events SET recorded_at = now() - interval '2 days'`)
	pr := passtest.Run(t, ctx, passtest.Prune(t, pool, prune.Config{EventsAfter: time.Hour}))
	if pr.DeletedAcked != 1 {
		t.Errorf("prune: DeletedAcked = %d, want 1", pr.DeletedAcked)
	}
	if pr.DeletedEvents == 0 {
		t.Errorf("prune: DeletedEvents = 0, want the events at or below the watermark (result %+v)", pr)
	}
}
