package migrations

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Format is the migration tool a team applies the schema with instead of
// the migrator: each gets one file per migration, named and laid out as
// that tool expects.
type Format string

// The formats `outboxkeeper migrate print --format` writes.
const (
	// Goose: NNNN_name.sql with -- +goose Up and Down sections; goose runs
	// each file in a transaction of its own.
	Goose Format = "goose"
	// GolangMigrate: NNNN_name.up.sql and NNNN_name.down.sql; golang-migrate
	// sends each file as it is, so the up file holds its own BEGIN/COMMIT.
	GolangMigrate Format = "golang-migrate"
	// Atlas: NNNN_name.sql in a versioned migration directory, with the
	// directory's atlas.sum; Atlas runs each file in a transaction.
	Atlas Format = "atlas"
	// Plain: NNNN_name.sql, each a BEGIN…COMMIT script for psql -f, Flyway,
	// sqitch or a DBA.
	Plain Format = "plain"
)

// Formats lists every Format, for usage messages.
var Formats = []Format{Goose, GolangMigrate, Atlas, Plain}

// ToolFile is one file for a migration tool.
type ToolFile struct {
	Name string
	Body string
}

// AtlasSumName is the integrity file of an Atlas migration directory.
const AtlasSumName = "atlas.sum"

// forwardOnly is what a down migration says, and does: outboxkeeper's
// migrations are never undone (docs/design.md: rolling back a deployment
// leaves the schema where it is), so a down that ran would leave the tool
// believing in a schema that does not exist.
const forwardOnly = "outboxkeeper migrations are forward-only: %s cannot be undone. " +
	"To run an older build on this schema, see README Deployment, Rolling back; " +
	"to stop here, do not apply the later files."

// ToolFiles renders the migrations after version from up to and including
// version to, for schema, as format's files: one per migration, each with
// outboxkeeper's own bookkeeping — the row in <schema>.schema_migrations
// with the file's checksum, exactly as the migrator records it — so the
// functions' version check sees the schema migrated once the tool has
// applied them. from is the version the schema is at (0 for none), and
// must be 0 or a version of this build; to must be one of this build's
// versions above it. An Atlas set ends with atlas.sum over its files
// (WriteToolFiles recomputes it over the whole directory).
func ToolFiles(schema string, format Format, from, to int) ([]ToolFile, error) {
	if !validFormat(format) {
		return nil, fmt.Errorf("migrate: format %q: want one of %s", format, formatList())
	}
	list, err := Load(schema)
	if err != nil {
		return nil, err
	}
	todo, done, err := span(list, from, to)
	if err != nil {
		return nil, err
	}
	b := newBookkeeping(schema, DefaultLockTimeout)
	var files []ToolFile
	for i, m := range todo {
		body := toolBody(b, schema, m, i == 0, done, list[0].Name == m.Name)
		stem := strings.TrimSuffix(m.Name, ".sql")
		switch format {
		case Goose:
			files = append(files, ToolFile{m.Name, gooseFile(m, body)})
		case GolangMigrate:
			files = append(files,
				ToolFile{stem + ".up.sql", header(m, format) + "BEGIN;\n" + body + "COMMIT;\n"},
				ToolFile{stem + ".down.sql", downFile(m, format)})
		case Atlas:
			files = append(files, ToolFile{m.Name, header(m, format) + body})
		case Plain:
			files = append(files, ToolFile{m.Name, header(m, format) + "BEGIN;\n" + body + "COMMIT;\n"})
		}
	}
	if format == Atlas {
		files = append(files, ToolFile{AtlasSumName, AtlasSum(files)})
	}
	return files, nil
}

func validFormat(f Format) bool {
	for _, g := range Formats {
		if f == g {
			return true
		}
	}
	return false
}

func formatList() string {
	s := make([]string, len(Formats))
	for i, f := range Formats {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}

// span splits list into the migrations above from up to to, and those at
// or below from (already applied).
func span(list []Migration, from, to int) (todo, done []Migration, err error) {
	versions := make([]string, len(list))
	known := map[int]bool{0: true}
	for i, m := range list {
		versions[i] = fmt.Sprint(m.Version())
		known[m.Version()] = true
	}
	have := fmt.Sprintf("this build has versions %s", strings.Join(versions, ", "))
	switch {
	case !known[from]:
		return nil, nil, fmt.Errorf("migrate: --from %d: not a version of this build (%s; 0 for a schema with none)", from, have)
	case to == from:
		return nil, nil, fmt.Errorf("migrate: --from %d --to %d: nothing to write; --to is the version to bring the schema to", from, to)
	case !known[to] || to < from:
		return nil, nil, fmt.Errorf("migrate: --to %d: want a version of this build above --from %d (%s)", to, from, have)
	}
	for _, m := range list {
		switch v := m.Version(); {
		case v <= from:
			done = append(done, m)
		case v <= to:
			todo = append(todo, m)
		}
	}
	return todo, done, nil
}

// toolBody is one migration with the bookkeeping around it, without the
// transaction's BEGIN and COMMIT (which the tool, or the format, adds).
// The search path is pinned as the migrator pins it and then restored,
// so whatever the tool runs next in the same transaction (goose records
// its version with an unqualified table name) finds its own objects.
func toolBody(b bookkeeping, schema string, m Migration, first bool, done []Migration, creates bool) string {
	var out strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&out, format, args...) }
	p("SELECT pg_catalog.set_config('outboxkeeper.saved_search_path', pg_catalog.current_setting('search_path'), true);\n")
	p("%s", b.lockPreamble("this file", "apply"))
	if creates {
		// A schema of this name that outboxkeeper did not make stops the
		// file here (42P06), as it stops the migrator.
		p("%s;\n", b.refuseForeign)
		// The migrator's own check: CREATE SCHEMA IF NOT EXISTS would need
		// CREATE on the database even for a schema a DBA made beforehand.
		p("DO $$ BEGIN IF pg_catalog.to_regnamespace(%s) IS NULL THEN CREATE SCHEMA %s; END IF; END $$;\n", literal(b.quoted), b.quoted)
	}
	if first {
		p("%s;\n", b.createTable)
		if len(done) > 0 {
			// A schema migrated before checksums were recorded.
			p("%s;\n", b.addColumns)
			p("%s;\n", b.backfillLiteral(done))
		}
	}
	// Applying a file twice would fail somewhere inside it; this says why.
	p("DO $$ BEGIN IF EXISTS (SELECT FROM %s.schema_migrations WHERE name = %s) THEN\n", b.quoted, literal(m.Name))
	p("  RAISE EXCEPTION 'outboxkeeper: %s is already applied to schema %s (recorded in its schema_migrations); nothing was changed', %s, %s;\n",
		"%", "%", literal(m.Name), literal(schema))
	p("END IF; END $$;\n")
	p("\n-- ---- %s (sha256 %s) ----\n", m.Name, m.Checksum)
	p("%s\n", strings.TrimRight(m.SQL, "\n"))
	p("-- ---- end of %s ----\n\n", m.Name)
	p("%s;\n", b.recordLiteral(m))
	p("SELECT pg_catalog.set_config('search_path', pg_catalog.current_setting('outboxkeeper.saved_search_path'), true);\n")
	return out.String()
}

// header opens every file: what it is and where it came from.
func header(m Migration, f Format) string {
	compat := ""
	if m.Compatible {
		compat = "-- It is marked compatible: builds older than it keep running on a schema that has it.\n"
	}
	return fmt.Sprintf("-- outboxkeeper migration %s, for %s (`outboxkeeper migrate print --format %s`).\n"+
		"-- It records itself in <schema>.schema_migrations with its checksum, as `outboxkeeper\n"+
		"-- migrate up` would, so the functions' schema version check accepts the schema.\n%s"+
		"-- Apply it as the schema's owner. Do not edit it: the checksum is of outboxkeeper's file.\n\n",
		m.Name, f, f, compat)
}

// downFile raises: see forwardOnly.
func downFile(m Migration, f Format) string {
	msg := fmt.Sprintf(forwardOnly, m.Name)
	return fmt.Sprintf("-- %s\n-- This down migration refuses, changing nothing (`outboxkeeper migrate print --format %s`).\n"+
		"DO $$ BEGIN RAISE EXCEPTION '%%', %s; END $$;\n", msg, f, literal(msg))
}

// gooseFile is a goose SQL migration. The whole Up section is one goose
// statement, sent as one multi-statement query in goose's transaction:
// its bodies hold semicolons that goose's own splitting would cut.
func gooseFile(m Migration, body string) string {
	return header(m, Goose) +
		"-- +goose Up\n-- +goose StatementBegin\n" + body + "-- +goose StatementEnd\n\n" +
		"-- +goose Down\n-- +goose StatementBegin\n" + downFile(m, Goose) + "-- +goose StatementEnd\n"
}

// AtlasSum is the atlas.sum of the .sql files among files, in name order:
// Atlas's integrity format, a running SHA-256 over each file's name and
// contents (each line is the running hash after that file, base64), and a
// first line that sums the lines.
func AtlasSum(files []ToolFile) string {
	var sql []ToolFile
	for _, f := range files {
		if strings.HasSuffix(f.Name, ".sql") {
			sql = append(sql, f)
		}
	}
	sort.Slice(sql, func(i, j int) bool { return sql[i].Name < sql[j].Name })
	running := sha256.New()
	total := sha256.New()
	var lines strings.Builder
	for _, f := range sql {
		running.Write([]byte(f.Name))
		running.Write([]byte(f.Body))
		h := base64.StdEncoding.EncodeToString(running.Sum(nil))
		total.Write([]byte(f.Name))
		total.Write([]byte(h))
		fmt.Fprintf(&lines, "%s h1:%s\n", f.Name, h)
	}
	return "h1:" + base64.StdEncoding.EncodeToString(total.Sum(nil)) + "\n" + lines.String()
}

// WriteToolFiles writes files into dir (made if missing) and returns the
// names it wrote. A file already there with the same contents is left as
// it is; one with other contents is refused before anything is written,
// since a tool may have applied it. An Atlas set's atlas.sum is recomputed
// over every .sql file in dir, so a directory written by several runs
// (--from 0 --to 12, later --from 12 --to 16) stays valid.
func WriteToolFiles(dir string, format Format, files []ToolFile) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, f := range files {
		if f.Name == AtlasSumName {
			continue
		}
		old, err := os.ReadFile(filepath.Join(dir, f.Name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, err
		case !bytes.Equal(old, []byte(f.Body)):
			return nil, fmt.Errorf("migrate: %s exists with other contents; a tool may have applied it: remove it or choose another --out",
				filepath.Join(dir, f.Name))
		}
	}
	var wrote []string
	for _, f := range files {
		if f.Name == AtlasSumName {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, f.Name), []byte(f.Body), 0o644); err != nil {
			return wrote, err
		}
		wrote = append(wrote, f.Name)
	}
	if format != Atlas {
		return wrote, nil
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil {
		return wrote, err
	}
	var all []ToolFile
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return wrote, err
		}
		all = append(all, ToolFile{filepath.Base(n), string(b)})
	}
	if err := os.WriteFile(filepath.Join(dir, AtlasSumName), []byte(AtlasSum(all)), 0o644); err != nil {
		return wrote, err
	}
	return append(wrote, AtlasSumName), nil
}
