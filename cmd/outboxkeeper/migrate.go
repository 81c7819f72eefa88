package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	migrations "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

var migrateCommand = &command{
	name:    "migrate",
	summary: "apply, inspect or print the outbox schema's migrations",
	help: `The outbox schema's migrations, embedded in this build (the same as in the
functions'). Each applied one is recorded in <schema>.schema_migrations with
the SHA-256 of its file; an applied file must never change.

A deployment with the template's MigrationsEnabled=true (the default)
applies them itself, with the functions' login, before the functions start.
These commands are for everyone else: a DBA who applies SQL by hand
(print), a check before or after a deployment (status), a database the
stack does not migrate (up).`,
	sub: []*command{migrateUp, migrateStatus, migratePrint},
}

type schemaFlags struct{ schema string }

func addSchema(fs *flag.FlagSet, f *schemaFlags) {
	fs.StringVar(&f.schema, "schema", "", "the outbox schema (default: OUTBOX_SCHEMA, else outbox)")
}

type upFlags struct {
	schemaFlags
	json    bool
	timeout time.Duration
}

var migrateUp = &command{
	name:    "up",
	summary: "apply every pending migration, in one transaction",
	help: `Applies every migration the schema lacks, in order, in one transaction, and
records each with its checksum; nothing is applied when one fails, and
nothing at all when every one is applied already. Two migrators at once
wait for each other. It refuses, changing nothing, when an applied
migration's file differs from this build's.

Every lock wait is bounded (lock_timeout 1s): a migration that needs a table
a long transaction holds does not queue the publishers behind itself. It
rolls back, pauses and tries again until --timeout, saying so on stderr,
then gives up naming the migration that waited; nothing is applied then.

The login needs to own the schema, or be allowed to create it (CREATE on the
database) the first time. Afterwards set up the roles, as the owner:
  SELECT <schema>.grant_maintainer('<functions role>');
  SELECT <schema>.grant_writer('<application role>');`,
	flags: func(fs *flag.FlagSet) any {
		f := &upFlags{}
		addSchema(fs, &f.schemaFlags)
		fs.BoolVar(&f.json, "json", false, "print JSON for scripts instead of text")
		addTimeout(fs, &f.timeout, migrations.DefaultBudget, "how long to keep trying while the migrations wait for locks")
		return f
	},
	run: runMigrateUp,
}

func runMigrateUp(ctx context.Context, e *env, opts any) error {
	f := opts.(*upFlags)
	return withLogin(ctx, e, f.schema, func(l *login) error {
		ctx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		res, err := migrations.ApplyWith(ctx, l.pool, l.schema, migrations.ApplyOptions{
			OnLockTimeout: lockWaitNote(e, "migrate up"),
		})
		if err != nil {
			return err
		}
		list, err := migrations.Load(l.schema)
		if err != nil {
			return err
		}
		sums := map[string]string{}
		for _, m := range list {
			sums[m.Name] = m.Checksum
		}
		latest := list[len(list)-1]
		if f.json {
			type applied struct {
				Name     string `json:"name"`
				Checksum string `json:"checksum"`
			}
			out := struct {
				Schema         string    `json:"schema"`
				Database       string    `json:"database"`
				Applied        []applied `json:"applied"`
				AlreadyApplied int       `json:"already_applied"`
				Attempts       int       `json:"attempts"`
				Version        int       `json:"version"`
				Latest         string    `json:"latest"`
			}{Schema: l.schema, Database: l.target, Applied: []applied{}, AlreadyApplied: len(res.Skipped),
				Attempts: res.Attempts, Version: latest.Version(), Latest: latest.Name}
			for _, name := range res.Applied {
				out.Applied = append(out.Applied, applied{name, sums[name]})
			}
			return printJSON(e.stdout, out)
		}
		fmt.Fprintf(e.stdout, "schema %s on %s: applied %d, already applied %d\n", l.schema, l.target, len(res.Applied), len(res.Skipped))
		for _, name := range res.Applied {
			fmt.Fprintf(e.stdout, "  applied %s (sha256 %s)\n", name, sums[name][:12])
		}
		_, err = fmt.Fprintf(e.stdout, "now at version %d (%s)\n", latest.Version(), latest.Name)
		return err
	})
}

type statusFlags struct {
	schemaFlags
	json bool
}

var migrateStatus = &command{
	name:    "status",
	summary: "applied and pending migrations, by name and checksum",
	help: `Lists this build's migrations and any the schema has beyond them, each with
its state and the first 12 hex digits of its file's SHA-256:
  applied   recorded, with this build's checksum
  pending   not applied yet: 'outboxkeeper migrate up' applies it
  changed   applied, but this build's file differs: restore the file as it was
            applied; a change belongs in a new migration
  unknown   applied by a newer build; the functions of this one refuse to
            start unless it is marked compatible (outboxkeeper:compatible)

Exit status 0 when this build's functions can run on the schema, 3 when
they would refuse to start (the reason is printed), 1 on an error.`,
	flags: func(fs *flag.FlagSet) any {
		f := &statusFlags{}
		addSchema(fs, &f.schemaFlags)
		fs.BoolVar(&f.json, "json", false, "print JSON for scripts instead of a table")
		return f
	},
	run: func(ctx context.Context, e *env, opts any) error {
		f := opts.(*statusFlags)
		return withLogin(ctx, e, f.schema, func(l *login) error {
			st, err := migrations.ReadStatus(ctx, l.pool, l.schema)
			if err != nil {
				return err
			}
			problem := st.Check()
			if f.json {
				err = printStatusJSON(e.stdout, l, st, problem)
			} else {
				err = printStatus(e.stdout, l, st, problem)
			}
			if err != nil {
				return err
			}
			if problem != nil {
				return errAttention
			}
			return nil
		})
	},
}

func printStatus(w io.Writer, l *login, st *migrations.Status, problem error) error {
	latest := st.Latest()
	current := "version 0 (no migrations applied)"
	if cur, ok := st.Current(); ok {
		current = fmt.Sprintf("version %d (%s)", migrations.Version(cur.Name), cur.Name)
	}
	fmt.Fprintf(w, "schema %s on %s\n", l.schema, l.target)
	fmt.Fprintf(w, "at %s; this build requires version %d (%s)\n\n", current, migrations.Version(latest.Name), latest.Name)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MIGRATION\tSTATE\tSHA256\tAPPLIED AT")
	for _, m := range st.Entries {
		applied := "-"
		if m.AppliedAt != nil {
			applied = m.AppliedAt.UTC().Format(time.DateTime + "Z")
		}
		sum := abbreviate(m.Checksum)
		if m.State == migrations.Changed {
			sum = abbreviate(m.Recorded) + " applied, " + abbreviate(m.Checksum) + " in this build"
		}
		state := string(m.State)
		if m.State == migrations.Unknown && m.Compatible {
			state += " (compatible)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.Name, state, sum, applied)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if problem != nil {
		_, err := fmt.Fprintf(w, "\n%v\n", problem)
		return err
	}
	_, err := fmt.Fprintf(w, "\nup to date: this build's functions can run on this schema\n")
	return err
}

func abbreviate(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	if sum == "" {
		return "-"
	}
	return sum
}

func printStatusJSON(w io.Writer, l *login, st *migrations.Status, problem error) error {
	type entry struct {
		Name       string     `json:"name"`
		State      string     `json:"state"`
		Checksum   string     `json:"checksum"`
		Recorded   string     `json:"recorded_checksum,omitempty"`
		AppliedAt  *time.Time `json:"applied_at"`
		Compatible bool       `json:"compatible"`
	}
	out := struct {
		Schema   string  `json:"schema"`
		Database string  `json:"database"`
		Current  string  `json:"current"`
		Required string  `json:"required"`
		Ready    bool    `json:"ready"`
		Problem  string  `json:"problem,omitempty"`
		Entries  []entry `json:"migrations"`
	}{Schema: l.schema, Database: l.target, Required: st.Latest().Name, Ready: problem == nil, Entries: []entry{}}
	if cur, ok := st.Current(); ok {
		out.Current = cur.Name
	}
	if problem != nil {
		out.Problem = problem.Error()
	}
	for _, m := range st.Entries {
		out.Entries = append(out.Entries, entry{m.Name, string(m.State), m.Checksum, m.Recorded, m.AppliedAt, m.Compatible})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

type printFlags struct {
	schemaFlags
	after    string
	json     bool
	format   string
	from, to int
	out      string
}

var migratePrint = &command{
	name:    "print",
	summary: "the SQL for a schema, to review or apply by hand",
	help: `Prints the SQL that the migrator would run, rendered for the schema, as one
transaction that also records each migration with its checksum, so a
schema migrated from it is recorded exactly as 'migrate up' records one.
It needs no database. For a schema that has some migrations already,
--after names the last one it has ('migrate status' shows it). With --json,
the same script as the "sql" field, beside the migrations it applies.

Apply it as the role that owns the schema (or, the first time, may create
it), for example:
  outboxkeeper migrate print --schema outbox > outbox.sql
  psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f outbox.sql
Its lock waits are bounded (lock_timeout 1s): behind a long transaction it
stops with nothing applied (SQLSTATE 55P03) rather than queue the publishers
behind it; run it again later.

For a team that applies its migrations with a tool of its own, --format
writes one file per migration, from the schema's version --from (0: none)
up to --to (default: this build's last), in that tool's naming and layout:
  goose           NNNN_name.sql with -- +goose Up and Down sections
  golang-migrate  NNNN_name.up.sql (with its BEGIN/COMMIT) and NNNN_name.down.sql
  atlas           NNNN_name.sql and the directory's atlas.sum
  plain           NNNN_name.sql, each one BEGIN...COMMIT script
each with the bookkeeping row in <schema>.schema_migrations, so the functions
start on the schema the tool leaves. The down migrations refuse, changing
nothing: outboxkeeper's migrations are forward-only. With --out DIR the files
are written there (an existing file with other contents is refused);
without it they are printed one after the other, each under a "-- file:"
line. docs/database-setup.md, "Teams that own their migrations", has each
tool's commands.`,
	flags: func(fs *flag.FlagSet) any {
		f := &printFlags{}
		addSchema(fs, &f.schemaFlags)
		fs.StringVar(&f.after, "after", "", "the last migration the schema already has, e.g. 0005_fill_cycles.sql (default: none)")
		fs.BoolVar(&f.json, "json", false, "print JSON for scripts: the migrations and the script")
		fs.StringVar(&f.format, "format", "", "one file per migration for a tool: goose, golang-migrate, atlas or plain (default: one script)")
		fs.IntVar(&f.from, "from", 0, "with --format: the version the schema is at (0: no migrations)")
		fs.IntVar(&f.to, "to", 0, "with --format: the version to bring it to (default: this build's last)")
		fs.StringVar(&f.out, "out", "", "with --format: the directory to write the files into (default: print them)")
		return f
	},
	run: func(ctx context.Context, e *env, opts any) error {
		f := opts.(*printFlags)
		schema, err := schemaOf(e, f.schema)
		if err != nil {
			return err
		}
		if f.format != "" {
			return printForTool(e, schema, f)
		}
		if f.from != 0 || f.to != 0 || f.out != "" {
			return usagef("--from, --to and --out go with --format")
		}
		if !f.json {
			return migrations.Print(e.stdout, schema, f.after)
		}
		var sql strings.Builder
		if err := migrations.Print(&sql, schema, f.after); err != nil {
			return err
		}
		list, err := migrations.Load(schema)
		if err != nil {
			return err
		}
		type migration struct {
			Name       string `json:"name"`
			Checksum   string `json:"checksum"`
			Compatible bool   `json:"compatible"`
		}
		out := struct {
			Schema     string      `json:"schema"`
			After      string      `json:"after"`
			Latest     string      `json:"latest"`
			Migrations []migration `json:"migrations"`
			SQL        string      `json:"sql"`
		}{Schema: schema, After: f.after, Latest: list[len(list)-1].Name, Migrations: []migration{}, SQL: sql.String()}
		for _, m := range list {
			if f.after == "" || m.Name > f.after {
				out.Migrations = append(out.Migrations, migration{m.Name, m.Checksum, m.Compatible})
			}
		}
		return printJSON(e.stdout, out)
	},
}

// printForTool is `migrate print --format`: one file per migration for
// the team's own migration tool.
func printForTool(e *env, schema string, f *printFlags) error {
	if f.after != "" {
		return usagef("--after is for the single script; with --format the schema's version is --from")
	}
	if f.json {
		return usagef("--json is for the single script; --format writes files")
	}
	if !slices.Contains(migrations.Formats, migrations.Format(f.format)) {
		return usagef("--format %q: want goose, golang-migrate, atlas or plain", f.format)
	}
	to := f.to
	if to == 0 {
		to = migrations.Latest().Version()
	}
	files, err := migrations.ToolFiles(schema, migrations.Format(f.format), f.from, to)
	if err != nil {
		return usagef("%v", err)
	}
	if f.out == "" {
		for _, file := range files {
			if _, err := fmt.Fprintf(e.stdout, "-- file: %s\n%s\n", file.Name, file.Body); err != nil {
				return err
			}
		}
		return nil
	}
	wrote, err := migrations.WriteToolFiles(f.out, migrations.Format(f.format), files)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %d files for %s to %s (schema %s, version %d to %d):\n", len(wrote), f.format, f.out, schema, f.from, to)
	for _, name := range wrote {
		fmt.Fprintf(e.stdout, "  %s\n", name)
	}
	return nil
}

// lockWaitNote says on stderr, for command, that a step waited longer than
// lock_timeout and when it is tried again: a long transaction, not the
// command, is what the operator has to look at.
func lockWaitNote(e *env, command string) func(*migrations.LockError, time.Duration) {
	return func(lerr *migrations.LockError, pause time.Duration) {
		fmt.Fprintf(e.stderr, "outboxkeeper %s: %s waited longer than lock_timeout %s for a lock (attempt %d): a long transaction holds it; trying again in %s\n",
			command, lerr.Step, lerr.LockTimeout, lerr.Attempts, pause)
	}
}
