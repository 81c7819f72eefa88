package migrations_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

func mustLoad(t *testing.T, schema string) []migrate.Migration {
	t.Helper()
	list, err := migrate.Load(schema)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// applyBefore applies, the way a tool would (ToolFiles, plain), every
// migration of schema before version v: the schema as it was when v
// came, for a test of what v does to what was there.
func applyBefore(t *testing.T, conn *pgx.Conn, schema string, v int) {
	t.Helper()
	before := 0
	for _, m := range mustLoad(t, schema) {
		if m.Version() < v {
			before = m.Version()
		}
	}
	files, err := migrate.ToolFiles(schema, migrate.Plain, 0, before)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := conn.Exec(context.Background(), f.Body, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
	}
}

func status(t *testing.T, db *testdb.DB, schema string) *migrate.Status {
	t.Helper()
	st, err := migrate.ReadStatus(context.Background(), db.Pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// oldMigrator leaves schema as the migrator before checksums did: a
// schema_migrations table of (name, applied_at) and the first n migrations.
func oldMigrator(t *testing.T, db *testdb.DB, schema string, n int) {
	t.Helper()
	ctx := context.Background()
	q := pgx.Identifier{schema}.Sanitize()
	db.Exec(t, `CREATE SCHEMA `+q+`; CREATE TABLE `+q+`.schema_migrations (
		name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`)
	for _, m := range mustLoad(t, schema)[:n] {
		if _, err := db.Pool.Exec(ctx, m.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		db.Exec(t, `INSERT INTO `+q+`.schema_migrations (name) VALUES ($1)`, m.Name)
	}
}

// The migrator's own statements (schema_migrations.sql) sit beside the
// migrations but are not one: every migration is a numbered file.
func TestMigrationsAreTheNumberedFilesOnly(t *testing.T) {
	list := mustLoad(t, "outbox")
	if len(list) == 0 {
		t.Fatal("no migrations embedded")
	}
	for _, m := range list {
		if v := m.Version(); v == 0 || !strings.HasPrefix(m.Name, fmt.Sprintf("%04d_", v)) {
			t.Errorf("%s is not a numbered migration (NNNN_name.sql)", m.Name)
		}
	}
}

func TestApplyRecordsEachChecksum(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	if _, err := migrate.Apply(ctx, db.Pool, "summed"); err != nil {
		t.Fatal(err)
	}
	for _, m := range mustLoad(t, "summed") {
		var sum string
		if err := db.Pool.QueryRow(ctx, `SELECT checksum FROM summed.schema_migrations WHERE name = $1`, m.Name).Scan(&sum); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if sum != m.Checksum {
			t.Errorf("%s: recorded checksum %s, want the file's %s", m.Name, sum, m.Checksum)
		}
	}
}

// A checksum is the file's, not the rendered SQL's: the same in every schema.
func TestChecksumDoesNotDependOnTheSchema(t *testing.T) {
	a, b := mustLoad(t, "outbox"), mustLoad(t, "other_outbox")
	for i := range a {
		if a[i].Checksum != b[i].Checksum {
			t.Errorf("%s: checksum %s in outbox, %s in other_outbox", a[i].Name, a[i].Checksum, b[i].Checksum)
		}
	}
}

// The upgrade path of every database migrated before checksums were
// recorded: the migrator adds the columns, trusts the files once for the
// rows it finds, and applies the rest with their checksums.
func TestApplyUpgradesATableWithoutChecksums(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	oldMigrator(t, db, "upgraded", 5)
	res, err := migrate.Apply(ctx, db.Pool, "upgraded")
	if err != nil {
		t.Fatal(err)
	}
	all := mustLoad(t, "upgraded")
	if len(res.Skipped) != 5 {
		t.Errorf("skipped %v, want the 5 applied by the old migrator", res.Skipped)
	}
	if len(res.Applied) != len(all)-5 {
		t.Errorf("applied %v, want the %d after them", res.Applied, len(all)-5)
	}
	st := status(t, db, "upgraded")
	for _, e := range st.Entries {
		if e.State != migrate.Applied || e.Recorded != e.Checksum {
			t.Errorf("%s: %s, recorded %q; want applied with checksum %s", e.Name, e.State, e.Recorded, e.Checksum)
		}
	}
}

// tamper makes it look as if name's file changed after it was applied.
func tamper(t *testing.T, db *testdb.DB, schema, name string) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(),
		`UPDATE `+pgx.Identifier{schema}.Sanitize()+`.schema_migrations SET checksum = 'feedface00' || checksum WHERE name = $1`, name); err != nil {
		t.Fatal(err)
	}
}

func TestApplyRefusesAChangedFile(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	oldMigrator(t, db, "edited", 2)
	db.Exec(t, `ALTER TABLE edited.schema_migrations ADD COLUMN checksum text,
		ADD COLUMN compatible boolean NOT NULL DEFAULT false`)
	db.Exec(t, `UPDATE edited.schema_migrations SET checksum = 'feedface00' WHERE name = '0002_deliveries.sql'`)
	_, err := migrate.Apply(ctx, db.Pool, "edited")
	var changed *migrate.ChangedError
	if !errors.As(err, &changed) {
		t.Fatalf("Apply = %v, want a *ChangedError", err)
	}
	if changed.Name != "0002_deliveries.sql" {
		t.Errorf("ChangedError names %s, want 0002_deliveries.sql", changed.Name)
	}
	if !strings.Contains(err.Error(), "changed after it was applied") {
		t.Errorf("message %q does not say what happened", err)
	}
	pending := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM edited.schema_migrations`)
	if pending != 2 {
		t.Errorf("%d migrations recorded after the refusal, want the 2 there before", pending)
	}
	if st := status(t, db, "edited"); st.Entries[1].State != migrate.Changed {
		t.Errorf("status of 0002_deliveries.sql = %s, want changed", st.Entries[1].State)
	}
}

func TestStatusOfANewSchemaIsAllPending(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := status(t, db, "never_migrated")
	if got := len(st.In(migrate.Pending)); got != len(st.Entries) || got == 0 {
		t.Errorf("%d of %d pending, want all", got, len(st.Entries))
	}
	if _, ok := st.Current(); ok {
		t.Error("Current() found a migration in a schema that does not exist")
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	latest := migrate.Latest()
	all := mustLoad(t, "outbox")
	previous := all[len(all)-2]

	t.Run("up to date", func(t *testing.T) {
		db := testdb.New(t)
		if err := migrate.Check(ctx, db.Pool, "outbox"); err != nil {
			t.Fatalf("Check on a migrated schema: %v", err)
		}
	})
	t.Run("never migrated", func(t *testing.T) {
		db := testdb.New(t)
		err := migrate.Check(ctx, db.Pool, "nothing_here")
		var verr *migrate.VersionError
		if !errors.As(err, &verr) {
			t.Fatalf("Check = %v, want a *VersionError", err)
		}
		for _, want := range []string{"version 0", latest.Name, "outboxkeeper migrate up"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q lacks %q", err, want)
			}
		}
	})
	t.Run("behind", func(t *testing.T) {
		db := testdb.New(t)
		db.Exec(t, `DELETE FROM outbox.schema_migrations WHERE name = $1`, latest.Name)
		err := migrate.Check(ctx, db.Pool, "outbox")
		var verr *migrate.VersionError
		if !errors.As(err, &verr) {
			t.Fatalf("Check = %v, want a *VersionError", err)
		}
		if verr.Current != previous.Name {
			t.Errorf("Current = %s, want %s", verr.Current, previous.Name)
		}
		if verr.Required != latest.Name {
			t.Errorf("Required = %s, want %s", verr.Required, latest.Name)
		}
		for _, want := range []string{previous.Name, latest.Name, "MigrationsEnabled", "outboxkeeper migrate up", "--after " + previous.Name} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q lacks %q", err, want)
			}
		}
	})
	t.Run("ahead", func(t *testing.T) {
		db := testdb.New(t)
		db.Exec(t, `INSERT INTO outbox.schema_migrations (name, checksum) VALUES ('9999_from_the_future.sql', 'abc')`)
		err := migrate.Check(ctx, db.Pool, "outbox")
		var verr *migrate.VersionError
		if !errors.As(err, &verr) {
			t.Fatalf("Check = %v, want a *VersionError", err)
		}
		if len(verr.Newer) != 1 || verr.Newer[0] != "9999_from_the_future.sql" {
			t.Errorf("Newer = %v, want the unknown migration", verr.Newer)
		}
		for _, want := range []string{"version 9999", "newer than this build", "not marked compatible"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q lacks %q", err, want)
			}
		}
	})
	t.Run("ahead, compatible", func(t *testing.T) {
		db := testdb.New(t)
		db.Exec(t, `INSERT INTO outbox.schema_migrations (name, checksum, compatible) VALUES ('9999_adds_a_table.sql', 'abc', true)`)
		if err := migrate.Check(ctx, db.Pool, "outbox"); err != nil {
			t.Fatalf("Check with a newer compatible migration: %v", err)
		}
	})
	t.Run("changed file", func(t *testing.T) {
		db := testdb.New(t)
		tamper(t, db, "outbox", all[0].Name)
		err := migrate.Check(ctx, db.Pool, "outbox")
		var changed *migrate.ChangedError
		if !errors.As(err, &changed) || changed.Name != all[0].Name {
			t.Fatalf("Check = %v, want a *ChangedError naming %s", err, all[0].Name)
		}
	})
}

func TestCompatibleMarkerIsReadAndRecorded(t *testing.T) {
	for _, m := range mustLoad(t, "outbox") {
		body, err := migrate.Files.ReadFile(m.Name)
		if err != nil {
			t.Fatal(err)
		}
		if want := bytes.Contains(body, []byte("-- "+migrate.CompatibleMarker)); m.Compatible != want {
			t.Errorf("%s: Compatible = %v, want %v", m.Name, m.Compatible, want)
		}
	}
}

// psqlPath is the psql of the server binaries the stack runs.
func psqlPath(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("pg_config", "--bindir").Output()
	if err != nil {
		t.Fatalf("pg_config: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "psql")
}

// psql runs script through psql as the README tells a DBA to.
func psql(t *testing.T, url, script string) {
	t.Helper()
	cmd := exec.Command(psqlPath(t), url, "-q", "-v", "ON_ERROR_STOP=1", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("psql: %v\n%s", err, out)
	}
}

// A schema migrated by hand from `migrate print`, with psql, is the same
// as one the migrator made: recorded with every checksum, accepted by the
// version check, and the migrator then has nothing to do.
func TestPrintedScriptMigratesLikeApply(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	var script bytes.Buffer
	if err := migrate.Print(&script, "by_hand", ""); err != nil {
		t.Fatal(err)
	}
	psql(t, db.URL, script.String())
	if err := migrate.Check(ctx, db.Pool, "by_hand"); err != nil {
		t.Fatalf("Check after the printed script: %v", err)
	}
	res, err := migrate.Apply(ctx, db.Pool, "by_hand")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 0 {
		t.Errorf("Apply after the printed script applied %v, want nothing", res.Applied)
	}
	if _, err := migrate.Apply(ctx, db.Pool, "by_apply"); err != nil {
		t.Fatal(err)
	}
	if a, b := objects(t, db, "by_hand"), objects(t, db, "by_apply"); a != b {
		t.Errorf("the printed script and Apply made different schemas:\nprint: %s\napply: %s", a, b)
	}
}

// objects lists a schema's relations, columns and functions with their
// definitions, the schema's name taken out.
func objects(t *testing.T, db *testdb.DB, schema string) string {
	t.Helper()
	s := testdb.Scalar[string](t, db.Pool, `
		SELECT string_agg(x, E'\n' ORDER BY x) FROM (
			SELECT c.relname || ' ' || c.relkind::text || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) AS x
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
			WHERE n.nspname = $1
			UNION ALL
			SELECT p.proname || ' ' || p.prosecdef::text || ' ' || coalesce(array_to_string(p.proconfig, ','), '') || ' ' ||
				replace(pg_get_functiondef(p.oid), $1, 'S')
			FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
		) o`, schema)
	return s
}

// The upgrade a DBA applies by hand: print --after the schema's last
// migration, on a schema the old migrator left.
func TestPrintedUpgradeFromAnOldSchema(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	all := mustLoad(t, "hand_upgraded")
	oldMigrator(t, db, "hand_upgraded", 5)
	var script bytes.Buffer
	if err := migrate.Print(&script, "hand_upgraded", all[4].Name); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(script.String(), "-- ---- "+all[4].Name) {
		t.Errorf("the script applies %s again, which --after names as applied", all[4].Name)
	}
	psql(t, db.URL, script.String())
	st := status(t, db, "hand_upgraded")
	for _, e := range st.Entries {
		if e.State != migrate.Applied || e.Recorded != e.Checksum {
			t.Errorf("%s: %s, recorded %q; want applied with its checksum", e.Name, e.State, e.Recorded)
		}
	}
	if err := migrate.Check(ctx, db.Pool, "hand_upgraded"); err != nil {
		t.Fatalf("Check: %v", err)
	}
}

func TestPrintRefusesAnUnknownStart(t *testing.T) {
	err := migrate.Print(&bytes.Buffer{}, "outbox", "0042_nope.sql")
	if err == nil || !strings.Contains(err.Error(), "0042_nope.sql") {
		t.Fatalf("Print --after an unknown migration = %v, want a refusal naming it", err)
	}
}
