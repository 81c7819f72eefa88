package migrations_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

// objectsIn lists what a schema holds, to compare before and after.
func objectsIn(t *testing.T, db *testdb.DB, schema string) string {
	t.Helper()
	return strings.Join(testdb.Column[string](t, db.Pool, `
		SELECT relname::text FROM pg_class WHERE relnamespace = to_regnamespace($1)
		UNION ALL SELECT proname::text FROM pg_proc WHERE pronamespace = to_regnamespace($1)
		ORDER BY 1`, schema), ",")
}

// A schema of the outbox's name that outboxkeeper did not make is refused
// with a message naming it, its database and what it holds, and nothing
// in it changes: by the migrator, and by the script migrate print writes.
func TestASchemaNameTakenByOthersIsRefusedBeforeAnythingChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct{ name, setup string }{
		{"a table of the application's", `CREATE TABLE taken.events (id bigserial PRIMARY KEY, body text)`},
		{"another tool's schema_migrations", `CREATE TABLE taken.schema_migrations (version bigint PRIMARY KEY, dirty boolean NOT NULL)`},
		{"a function alone", `CREATE FUNCTION taken.f() RETURNS int LANGUAGE sql AS 'SELECT 1'`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			db.Exec(t, `CREATE SCHEMA taken`)
			db.Exec(t, c.setup)
			before := objectsIn(t, db, "taken")

			_, err := migrate.Apply(ctx, db.Pool, "taken")
			var taken *migrate.SchemaTakenError
			if !errors.As(err, &taken) {
				t.Fatalf("Apply = %v, want a *SchemaTakenError", err)
			}
			for _, want := range []string{`schema taken already exists`, "database " + db.Name, "not an outboxkeeper schema", "OUTBOX_SCHEMA"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal %q does not say %q", err, want)
				}
			}
			if after := objectsIn(t, db, "taken"); after != before {
				t.Errorf("the schema held %s and holds %s after the refusal", before, after)
			}

			var script bytes.Buffer
			if err := migrate.Print(&script, "taken", ""); err != nil {
				t.Fatal(err)
			}
			conn := db.Connect(t)
			_, err = conn.Exec(ctx, script.String(), pgx.QueryExecModeSimpleProtocol)
			if got := sqlstate(err); got != "42P06" {
				t.Errorf("the printed script: %v, want the refusal (42P06)", err)
			}
			_, _ = conn.Exec(ctx, `ROLLBACK`)
			if after := objectsIn(t, db, "taken"); after != before {
				t.Errorf("the schema held %s and holds %s after the printed script", before, after)
			}
		})
	}
}

// A schema a DBA created empty for outboxkeeper is migrated, as before.
func TestAnEmptySchemaMadeBeforehandIsMigrated(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	db.Exec(t, `CREATE SCHEMA made_for_us`)
	if _, err := migrate.Apply(context.Background(), db.Pool, "made_for_us"); err != nil {
		t.Fatalf("Apply on an empty schema: %v", err)
	}
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT made_for_us.publish('t', '{}')`); n != 1 {
		t.Errorf("publish in the migrated schema = %d, want 1", n)
	}
}
