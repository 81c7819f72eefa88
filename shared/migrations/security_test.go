package migrations_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
)

// plantHijacks creates, in the test database's public schema (on the
// search_path of every login by default, and writable by everyone on
// PostgreSQL 14 and older), an exact-typed version of each built-in our
// SQL uses with an implicit cast: each one, if PostgreSQL ever picks it,
// fails its statement with "hijacked: ...".
func plantHijacks(t *testing.T, db *testdb.DB) {
	t.Helper()
	for _, sql := range []string{
		`CREATE FUNCTION public.hijack_times(bigint, interval) RETURNS interval LANGUAGE plpgsql
			AS $$BEGIN RAISE EXCEPTION 'hijacked: bigint * interval'; END$$`,
		`CREATE OPERATOR public.* (LEFTARG = bigint, RIGHTARG = interval, FUNCTION = public.hijack_times)`,
		`CREATE FUNCTION public.hijack_concat(text, bigint) RETURNS text LANGUAGE plpgsql
			AS $$BEGIN RAISE EXCEPTION 'hijacked: text || bigint'; END$$`,
		`CREATE OPERATOR public.|| (LEFTARG = text, RIGHTARG = bigint, FUNCTION = public.hijack_concat)`,
		`CREATE FUNCTION public.hijack_oid_eq(oid, regclass) RETURNS boolean LANGUAGE plpgsql
			AS $$BEGIN RAISE EXCEPTION 'hijacked: oid = regclass'; END$$`,
		`CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regclass, FUNCTION = public.hijack_oid_eq)`,
		`CREATE FUNCTION public.hijack_lt(numeric, bigint) RETURNS boolean LANGUAGE plpgsql
			AS $$BEGIN RAISE EXCEPTION 'hijacked: numeric < bigint'; END$$`,
		`CREATE OPERATOR public.< (LEFTARG = numeric, RIGHTARG = bigint, FUNCTION = public.hijack_lt)`,
		`CREATE FUNCTION public.unnest(bigint[]) RETURNS SETOF bigint LANGUAGE plpgsql
			AS $$BEGIN RAISE EXCEPTION 'hijacked: unnest(bigint[])'; END$$`,
	} {
		if _, err := db.Pool.Exec(context.Background(), sql); err != nil {
			t.Fatalf("plant: %v\n%s", err, sql)
		}
	}
}

// plantSchema lets writer create a schema, has it create "planted" with
// planted.ran(what), which raises "planted <what> ran", planted
// pg_current_xact_id and nextval that call it, and then each of objects,
// and returns writer's connection: a caller that puts planted first on its
// search_path sees any of them that runs fail its statement.
func plantSchema(t *testing.T, db *testdb.DB, writer *testdb.Role, objects ...string) *pgx.Conn {
	t.Helper()
	db.Exec(t, `GRANT CREATE ON DATABASE `+pgx.Identifier{db.Name}.Sanitize()+` TO `+pgx.Identifier{writer.Name}.Sanitize())
	conn := writer.Connect(t)
	for _, sql := range append([]string{
		`CREATE SCHEMA planted`,
		`CREATE FUNCTION planted.ran(what text) RETURNS text LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'planted % ran', what; END $$`,
		`CREATE FUNCTION planted.pg_current_xact_id() RETURNS pg_catalog.xid8 LANGUAGE sql
			AS $$ SELECT planted.ran('pg_current_xact_id')::pg_catalog.xid8 $$`,
		`CREATE FUNCTION planted.nextval(pg_catalog.regclass) RETURNS bigint LANGUAGE sql
			AS $$ SELECT planted.ran('nextval')::bigint $$`,
	}, objects...) {
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatalf("plant: %s: %v", sql, err)
		}
	}
	return conn
}

// The planted objects are really picked on an unpinned search_path, so
// the tests below would see them if our SQL did not pin it.
func TestPlantedOperatorsWinOnAnUnpinnedPath(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	plantHijacks(t, db)
	_, err := db.Pool.Exec(context.Background(), `SELECT 2::bigint * interval '1 second'`)
	if err == nil || !strings.Contains(err.Error(), "hijacked") {
		t.Fatalf("the planted operator was not picked (%v): the tests that rely on it prove nothing", err)
	}
}

// Every pass runs with search_path pinned to pg_catalog, pg_temp (the
// Bounded statement's settings), so no planted operator or function runs
// with the functions' rights, whatever the login's own search_path.
func TestPlantedOperatorsDoNotRunInThePasses(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	m := db.Maintainer(t)
	plantHijacks(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	everyPassDoesItsWork(t, ctx, db, m.Pool)
}

// allocation_head, which the functions and applications call, compares
// oid = regclass: it runs with its own pinned path.
func TestPlantedOperatorsDoNotRunInAllocationHead(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	plantHijacks(t, db)
	var head int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT outbox.allocation_head()`).Scan(&head); err != nil {
		t.Errorf("allocation_head: %v", err)
	}
}

// The new-event notification runs at COMMIT as whoever publishes, with
// text || bigint: it runs with its own pinned path.
func TestPlantedOperatorsDoNotRunInThePublishNotification(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	writer := db.Writer(t)
	ctx := context.Background()
	db.Exec(t, `SELECT outbox.set_publish_notifications(true)`)
	plantHijacks(t, db)
	ob, err := outbox.New(writer.Pool, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
		_, err := tx.Publish(ctx, "t", map[string]int{"a": 1})
		return err
	}); err != nil {
		t.Errorf("publish and commit with notifications on: %v", err)
	}
}

// Every function a writer or a reader calls runs with the planted
// operators in public, on the writer's default path: publish and
// publish_batch have no SET clause (0013) and resolve nothing through the
// path, read_events sets only its plan cache mode and uses exact-typed
// operators, commit_position and allocation_head pin the path.
func TestPlantedOperatorsDoNotRunInTheCallersFunctions(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	writer := db.Writer(t)
	ctx := context.Background()
	plantHijacks(t, db)
	for _, c := range []struct{ name, sql string }{
		{"publish", `SELECT outbox.publish('t', '{"a":1}')`},
		{"publish with headers", `SELECT outbox.publish('t', '{"a":1}', '{"h":1}')`},
		{"publish_batch", `SELECT max(s) FROM outbox.publish_batch('t', ARRAY['{"b":2}'::jsonb, '{"c":3}'], '{"h":2}') s`},
		{"read_events", `SELECT count(*) FROM outbox.read_events(0, 100)`},
		{"commit_position", `SELECT outbox.commit_position('reader', 1)`},
		{"allocation_head", `SELECT outbox.allocation_head()`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got int64
			if err := writer.Pool.QueryRow(ctx, c.sql).Scan(&got); err != nil {
				t.Errorf("%s with operators planted in public: %v", c.name, err)
			}
		})
	}
}

// The migrator pins the path for its transaction: its own bookkeeping
// compares oid = regclass.
func TestPlantedOperatorsDoNotRunInTheMigrator(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	plantHijacks(t, db)
	ctx := context.Background()
	conn := db.Connect(t)
	if _, err := migrate.Apply(ctx, conn, "second_outbox"); err != nil {
		t.Errorf("apply to a new schema: %v", err)
	}
}

// A schema of the longest allowed name works end to end: its NOTIFY
// channels (the name plus _events, _deliveries) still fit PostgreSQL's 63
// bytes, so placeholders, which notify in the same statement, go in.
func TestLongestSchemaNameNotifies(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	name := "s" + strings.Repeat("x", store.MaxSchemaLength-1)
	ctx := context.Background()
	if _, err := migrate.Apply(ctx, db.Connect(t), name); err != nil {
		t.Fatalf("apply to a %d-byte schema: %v", len(name), err)
	}
	schema := store.MustSchema(name)
	w, err := store.NewEvents(schema).InsertPlaceholders(ctx, db.Pool, []int64{1}, "fill")
	if err != nil {
		t.Errorf("placeholder insert in a %d-byte schema: %v", len(name), err)
	}
	if w.N != 1 {
		t.Errorf("wrote %d placeholders, want 1", w.N)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT pg_notify($1, '')`, schema.DeliveriesChannel()); err != nil {
		t.Errorf("notify %s: %v", schema.DeliveriesChannel(), err)
	}
}

// One byte longer is refused where the name is read, before it can reach
// a deployment.
func TestSchemaNameOneByteTooLongIsRefused(t *testing.T) {
	name := "s" + strings.Repeat("x", store.MaxSchemaLength)
	if err := store.ValidSchema(name); err == nil {
		t.Errorf("a %d-byte schema name was accepted", len(name))
	}
}
