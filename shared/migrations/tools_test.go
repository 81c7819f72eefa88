package migrations_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	gomigrate "github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	_ "github.com/golang-migrate/migrate/v4/source/file"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

// scheduledFunctions are the functions that check the schema version at
// init, each with what it needs to serve one invocation.
var scheduledFunctions = []struct {
	name  string
	env   map[string]string
	event string
}{
	{"fill", map[string]string{"FILL_WATCH": "false"}, `{"source":"outboxkeeper.schedule"}`},
	{"sweep", nil, `{"source":"outboxkeeper.schedule"}`},
	{"prune", nil, `{"source":"outboxkeeper.schedule"}`},
	{"compensate", nil, `{"Records":[]}`},
}

// startsEveryFunction starts each function's real bootstrap under
// aws-lambda-rie on schema and invokes it once: each one's init checks the
// schema version, and a refusal fails the invocation.
func startsEveryFunction(t *testing.T, db *testdb.DB, schema string) {
	t.Helper()
	for _, f := range scheduledFunctions {
		bin := lambdatest.Build(t, f.name)
		env := map[string]string{"DATABASE_URL": db.URL, "OUTBOX_SCHEMA": schema}
		for k, v := range f.env {
			env[k] = v
		}
		fn := lambdatest.Start(t, bin, env)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := fn.Invoke(ctx, []byte(f.event))
		cancel()
		if err != nil {
			t.Errorf("%s on schema %s: %v\n%s\n%s", f.name, schema, err, out, fn.Logs())
		}
	}
}

// recorded is the schema's schema_migrations, name -> checksum and
// compatible, as the version check reads it.
func recorded(t *testing.T, db *testdb.DB, schema string) map[string]string {
	t.Helper()
	return testdb.Map[string, string](t, db.Pool,
		`SELECT name, checksum || ' ' || compatible FROM `+pgx.Identifier{schema, "schema_migrations"}.Sanitize())
}

func wantRecorded(t *testing.T, schema string, upTo int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range mustLoad(t, schema) {
		if m.Version() <= upTo {
			out[m.Name] = m.Checksum + " " + map[bool]string{true: "true", false: "false"}[m.Compatible]
		}
	}
	return out
}

// golangMigrate opens golang-migrate's own migrator on dir and the test
// database, its version table kept out of the outbox schema.
func golangMigrate(t *testing.T, db *testdb.DB, dir string) *gomigrate.Migrate {
	t.Helper()
	u := strings.Replace(db.DirectURL, "postgres://", "pgx5://", 1)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	m, err := gomigrate.New("file://"+dir, u+sep+"x-migrations-table=outbox_tool_versions")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// The golang-migrate files, applied by golang-migrate itself to a fresh
// schema in two steps as a team would (the files up to 12, later the rest
// into the same directory), record every migration as the migrator does,
// and every function then starts on the schema. A down migration refuses
// and changes nothing.
func TestGolangMigrateAppliesThePrintedFilesAndEveryFunctionStarts(t *testing.T) {
	t.Parallel()
	const schema = "gm_outbox"
	db := testdb.New(t)
	dir := t.TempDir()
	latest := migrate.Latest().Version()

	files, err := migrate.ToolFiles(schema, migrate.GolangMigrate, 0, 12)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.WriteToolFiles(dir, migrate.GolangMigrate, files); err != nil {
		t.Fatal(err)
	}
	m := golangMigrate(t, db, dir)
	if err := m.Up(); err != nil {
		t.Fatalf("golang-migrate up to 12: %v", err)
	}
	if got, want := recorded(t, db, schema), wantRecorded(t, schema, 12); !equalMaps(got, want) {
		t.Fatalf("after version 12 the schema records %v, want %v", got, want)
	}

	files, err = migrate.ToolFiles(schema, migrate.GolangMigrate, 12, latest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.WriteToolFiles(dir, migrate.GolangMigrate, files); err != nil {
		t.Fatal(err)
	}
	m = golangMigrate(t, db, dir)
	if err := m.Up(); err != nil {
		t.Fatalf("golang-migrate up to %d: %v", latest, err)
	}
	v, dirty, err := m.Version()
	if err != nil || int(v) != latest || dirty {
		t.Fatalf("golang-migrate says version %d dirty %v (%v), want %d clean", v, dirty, err, latest)
	}
	if got, want := recorded(t, db, schema), wantRecorded(t, schema, latest); !equalMaps(got, want) {
		t.Fatalf("the schema records %v, want %v", got, want)
	}
	st, err := migrate.ReadStatus(context.Background(), db.Pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Check(); err != nil {
		t.Fatalf("the version check refuses the schema golang-migrate left: %v", err)
	}
	startsEveryFunction(t, db, schema)

	err = m.Steps(-1)
	if err == nil || !strings.Contains(err.Error(), "forward-only") {
		t.Fatalf("golang-migrate down: %v, want the forward-only refusal", err)
	}
	if got, want := recorded(t, db, schema), wantRecorded(t, schema, latest); !equalMaps(got, want) {
		t.Errorf("after the refused down the schema records %v, want it unchanged", got)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// goosePart is the SQL of one annotated section of a goose file, as goose
// reads it: between StatementBegin and StatementEnd after "-- +goose Up"
// (or Down).
func goosePart(t *testing.T, body, section string) string {
	t.Helper()
	_, rest, ok := strings.Cut(body, "-- +goose "+section+"\n-- +goose StatementBegin\n")
	if !ok {
		t.Fatalf("no %s section", section)
	}
	stmt, _, ok := strings.Cut(rest, "-- +goose StatementEnd\n")
	if !ok {
		t.Fatalf("the %s section has no StatementEnd", section)
	}
	return stmt
}

// Goose's, Atlas's and the plain files, each applied the way its tool runs
// one file (goose and Atlas in a transaction of their own, the plain one
// as a psql script), leave the schema recorded as the migrator would, and
// the version check passes.
func TestEveryFormatMigratesLikeTheMigrator(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	latest := migrate.Latest().Version()
	for _, f := range []migrate.Format{migrate.Goose, migrate.Atlas, migrate.Plain} {
		t.Run(string(f), func(t *testing.T) {
			schema := "fmt_" + strings.ReplaceAll(string(f), "-", "_")
			files, err := migrate.ToolFiles(schema, f, 0, latest)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			conn := db.Connect(t)
			for _, file := range files {
				if file.Name == migrate.AtlasSumName {
					continue
				}
				if f == migrate.Plain {
					if _, err := conn.Exec(ctx, file.Body, pgx.QueryExecModeSimpleProtocol); err != nil {
						t.Fatalf("%s: %v", file.Name, err)
					}
					continue
				}
				sql := file.Body
				if f == migrate.Goose {
					sql = goosePart(t, file.Body, "Up")
				}
				// The tool's transaction, with a search path of its own that
				// what it runs after the file (goose's unqualified version
				// table) still needs.
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, `SET LOCAL search_path TO tool_schema, public`); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
					t.Fatalf("%s: %v", file.Name, err)
				}
				var path string
				if err := tx.QueryRow(ctx, `SELECT current_setting('search_path')`).Scan(&path); err != nil || path != "tool_schema, public" {
					t.Errorf("%s: the search path after it is %q (%v), want the tool's back", file.Name, path, err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if got, want := recorded(t, db, schema), wantRecorded(t, schema, latest); !equalMaps(got, want) {
				t.Fatalf("the schema records %v, want %v", got, want)
			}
			st, err := migrate.ReadStatus(ctx, db.Pool, schema)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Check(); err != nil {
				t.Fatalf("the version check refuses the schema: %v", err)
			}
			// Applying a file again fails saying so, changing nothing.
			again := files[len(files)-1]
			if f == migrate.Atlas {
				again = files[len(files)-2]
			}
			sql := again.Body
			if f == migrate.Goose {
				sql = goosePart(t, again.Body, "Up")
			}
			_, err = conn.Exec(ctx, "BEGIN;\n"+strings.TrimSuffix(strings.TrimPrefix(sql, "BEGIN;\n"), "COMMIT;\n")+"COMMIT;", pgx.QueryExecModeSimpleProtocol)
			if err == nil || !strings.Contains(err.Error(), "is already applied") {
				t.Errorf("applying %s twice: %v, want a refusal naming it", again.Name, err)
			}
			conn.Exec(ctx, "ROLLBACK") //nolint:errcheck // leave the aborted transaction
			if f == migrate.Goose {
				_, err := conn.Exec(ctx, "BEGIN;\n"+goosePart(t, again.Body, "Down")+"COMMIT;", pgx.QueryExecModeSimpleProtocol)
				if err == nil || !strings.Contains(err.Error(), "forward-only") {
					t.Errorf("goose down: %v, want the forward-only refusal", err)
				}
				conn.Exec(ctx, "ROLLBACK") //nolint:errcheck
			}
		})
	}
}

// Each tool's own naming: goose and Atlas NNNN_name.sql (Atlas with its
// atlas.sum), golang-migrate an up and a down file per version, plain one
// script each; the range is (from, to].
func TestToolFilesAreNamedAsEachToolExpects(t *testing.T) {
	names := func(f migrate.Format, from, to int) []string {
		files, err := migrate.ToolFiles("outbox", f, from, to)
		if err != nil {
			t.Fatalf("%s %d..%d: %v", f, from, to, err)
		}
		var out []string
		for _, file := range files {
			out = append(out, file.Name)
		}
		return out
	}
	if got := names(migrate.GolangMigrate, 5, 7); strings.Join(got, " ") != "0006_roles.up.sql 0006_roles.down.sql 0007_read_side.up.sql 0007_read_side.down.sql" {
		t.Errorf("golang-migrate 5..7: %v", got)
	}
	if got := names(migrate.Goose, 0, 2); strings.Join(got, " ") != "0001_events.sql 0002_deliveries.sql" {
		t.Errorf("goose 0..2: %v", got)
	}
	if got := names(migrate.Atlas, 13, 14); strings.Join(got, " ") != "0014_fill_handover.sql atlas.sum" {
		t.Errorf("atlas 13..14: %v", got)
	}
	if got := names(migrate.Plain, 0, 1); strings.Join(got, " ") != "0001_events.sql" {
		t.Errorf("plain 0..1: %v", got)
	}
	for _, c := range []struct {
		from, to int
		want     string
	}{
		{3, 3, "nothing to write"},
		{5, 2, "above --from 5"},
		{-1, 4, "--from -1: not a version"},
		{0, 999, "--to 999"},
	} {
		if _, err := migrate.ToolFiles("outbox", migrate.Plain, c.from, c.to); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--from %d --to %d: %v, want %q", c.from, c.to, err, c.want)
		}
	}
	if _, err := migrate.ToolFiles("outbox", "flyway", 0, 1); err == nil || !strings.Contains(err.Error(), "golang-migrate") {
		t.Errorf("an unknown format: %v, want the list of formats", err)
	}
}

// atlas.sum: the first line sums the others, each other line is the
// running hash after its file; it changes with any file's contents, and a
// directory written in two runs gets the sum of all its files.
func TestAtlasSumCoversTheWholeDirectory(t *testing.T) {
	dir := t.TempDir()
	files, err := migrate.ToolFiles("outbox", migrate.Atlas, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.WriteToolFiles(dir, migrate.Atlas, files); err != nil {
		t.Fatal(err)
	}
	more, err := migrate.ToolFiles("outbox", migrate.Atlas, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.WriteToolFiles(dir, migrate.Atlas, more); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(dir, migrate.AtlasSumName))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(sum)), "\n")
	line := regexp.MustCompile(`^(\d{4}_[a-z_]+\.sql) h1:[A-Za-z0-9+/]{43}=$`)
	if len(lines) != 5 || !regexp.MustCompile(`^h1:[A-Za-z0-9+/]{43}=$`).MatchString(lines[0]) {
		t.Fatalf("atlas.sum %q: want a total line and one line for each of the 4 files", sum)
	}
	for i, name := range []string{"0001_events.sql", "0002_deliveries.sql", "0003_fill_state.sql", "0004_sweep_state.sql"} {
		if m := line.FindStringSubmatch(lines[i+1]); m == nil || m[1] != name {
			t.Errorf("atlas.sum line %d is %q, want %s's", i+1, lines[i+1], name)
		}
	}
	all := append(files[:len(files)-1], more[:len(more)-1]...)
	if got := migrate.AtlasSum(all); got != string(sum) {
		t.Errorf("the directory's atlas.sum is not the sum of all its files")
	}
	all[0].Body += "\n"
	if migrate.AtlasSum(all) == string(sum) {
		t.Error("atlas.sum does not change with a file's contents")
	}
	// A changed file in the directory is refused, not overwritten.
	if err := os.WriteFile(filepath.Join(dir, files[0].Name), []byte("-- edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.WriteToolFiles(dir, migrate.Atlas, files); err == nil || !strings.Contains(err.Error(), "other contents") {
		t.Errorf("writing over an edited file: %v, want a refusal", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, files[0].Name)); string(b) != "-- edited\n" {
		t.Error("the edited file was overwritten")
	}
}
