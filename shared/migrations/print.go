package migrations

import (
	"fmt"
	"io"
	"strings"
)

// Print writes, as one SQL script, what Apply would do to a schema that has
// every migration up to and including after applied ("" for a schema with
// none): the bookkeeping table, each later migration followed by the row
// that records it with its checksum, all in one transaction under the
// migrators' lock. A team whose DBAs apply SQL themselves reviews and
// applies this instead of running the migrator; the schema it leaves is
// recorded exactly as the migrator records one, so the functions' version
// check and `outboxkeeper migrate status` see it as migrated.
func Print(w io.Writer, schema, after string) error {
	list, err := Load(schema)
	if err != nil {
		return err
	}
	start := 0
	if after != "" {
		start = -1
		for i, m := range list {
			if m.Name == after {
				start = i + 1
			}
		}
		if start < 0 {
			return fmt.Errorf("migrate: --after %s: no such migration in this build (it has %s to %s)", after, list[0].Name, list[len(list)-1].Name)
		}
	}
	todo, done := list[start:], list[:start]
	latest := list[len(list)-1]
	b := newBookkeeping(schema, DefaultLockTimeout)

	var out strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&out, format, args...) }
	from := "a schema with no migrations"
	if after != "" {
		from = "a schema at " + after
	}
	p("-- outboxkeeper migrations for schema %s: from %s to version %d (%s).\n", b.quoted, from, latest.Version(), latest.Name)
	p("-- Rendered by `outboxkeeper migrate print`. Apply it as the role that owns the schema\n")
	p("-- (or will: the first migration needs CREATE on the database), in one go:\n")
	p("--   psql \"$DATABASE_URL\" -v ON_ERROR_STOP=1 -f migrations.sql\n")
	p("-- then set up the roles: SELECT %s.grant_maintainer('<functions role>'), %s.grant_writer('<application role>').\n", b.quoted, b.quoted)
	p("BEGIN;\n")
	p("%s", b.lockPreamble("the script", "run"))
	p("-- A schema of this name that outboxkeeper did not make stops the script here (42P06).\n")
	p("%s;\n", b.refuseForeign)
	p("%s;\n", b.createSchema)
	p("%s;\n", b.createTable)
	p("%s;\n", b.addColumns)
	if len(done) > 0 {
		// The rows of migrations applied before checksums were recorded.
		p("%s;\n", b.backfillLiteral(done))
	}
	if len(todo) == 0 {
		p("\n-- Nothing to apply: %s is this build's last migration.\n", after)
	}
	for _, m := range todo {
		p("\n-- ---- %s (sha256 %s) ----\n", m.Name, m.Checksum)
		p("%s\n", strings.TrimRight(m.SQL, "\n"))
		p("%s;\n", b.recordLiteral(m))
	}
	p("COMMIT;\n")
	_, err = io.WriteString(w, out.String())
	return err
}
