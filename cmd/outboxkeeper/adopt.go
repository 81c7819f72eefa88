package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	migrations "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

type adoptFlags struct {
	schemaFlags
	json    bool
	timeout time.Duration
	opts    migrations.AdoptOptions
}

var adoptCommand = &command{
	name:    "adopt",
	summary: "move an outbox table that exists under outboxkeeper, writers unchanged",
	help: `Moves an application's own outbox table (a bigserial id, a topic and a JSON
payload, polled by the application's relay) under outboxkeeper, in one
transaction, without changing a writer (docs/adopting.md):

  - the migrations are applied to the outbox schema first (a schema of that
    name outboxkeeper did not make is refused, changing nothing);
  - the table is renamed (--archive-as, default <table>_legacy) and its name
    becomes a view of it whose INSERT publishes an event: INSERT ... RETURNING
    id answers the event's sequence, COPY works, the table's grants are the
    view's. The xid is taken before the sequence (docs/design.md §3.1);
  - the old rows stay where they were, readable and updatable through the
    view: the old relay drains them unchanged, and no new row reaches them;
  - the outbox's sequences continue after the old ids, and --consumer (the
    relay's, relay:default) starts at the last old id: it never sends an old
    row.

Retire the old relay once it has sent every old row — for a relay that marks
rows, when SELECT count(*) FROM <table> WHERE <mark> IS NULL is 0; for one that
polls id > last, when its last reaches the legacy_max_id printed below — then
start outboxkeeper's relay (before, if the order across the switch does not
matter: no event is sent by both).

The switch locks the table (ACCESS EXCLUSIVE) and the outbox's sequence: it
waits for the transactions that inserted into it, and holds new inserts back
until it commits, at most lock_timeout 1s an attempt; behind a long
transaction it rolls back and tries again until --timeout. Run it as the
login that owns the table and the outbox schema.

  outboxkeeper adopt --table public.outbox
  outboxkeeper adopt --table app.outbox --topic-column aggregatetype --payload-column payload \
      --aggregate-type-column aggregatetype --aggregate-id-column aggregateid --event-type-column type`,
	flags: func(fs *flag.FlagSet) any {
		f := &adoptFlags{}
		addSchema(fs, &f.schemaFlags)
		fs.StringVar(&f.opts.Table, "table", "", "the outbox table to adopt, schema.table (required)")
		fs.StringVar(&f.opts.PayloadColumn, "payload-column", "payload", "the column holding the event's JSON (jsonb, json or text)")
		fs.StringVar(&f.opts.TopicColumn, "topic-column", "topic", "the column holding the event's topic")
		fs.StringVar(&f.opts.Topic, "topic", "", "every event's topic, instead of --topic-column")
		fs.StringVar(&f.opts.HeadersColumn, "headers-column", "", "a jsonb or json column holding the event's headers")
		fs.StringVar(&f.opts.AggregateTypeColumn, "aggregate-type-column", "", "the column for the event's aggregate_type")
		fs.StringVar(&f.opts.AggregateIDColumn, "aggregate-id-column", "", "the column for the event's aggregate_id")
		fs.StringVar(&f.opts.EventTypeColumn, "event-type-column", "", "the column for the event's event_type")
		fs.StringVar(&f.opts.Consumer, "consumer", migrations.DefaultAdoptConsumer, "the consumer registered at the switch (the relay's: relay:<RELAY_NAME>)")
		fs.StringVar(&f.opts.ArchiveAs, "archive-as", "", "the table's new name, in its schema (default <table>_legacy)")
		fs.BoolVar(&f.json, "json", false, "print JSON for scripts instead of text")
		addTimeout(fs, &f.timeout, migrations.DefaultBudget, "how long to keep trying while the switch waits for locks")
		return f
	},
	run: runAdopt,
}

func runAdopt(ctx context.Context, e *env, opts any) error {
	f := opts.(*adoptFlags)
	if f.opts.Table == "" {
		return usagef("--table is required: the outbox table to adopt, schema.table")
	}
	if _, err := migrations.SplitTable(f.opts.Table); err != nil {
		return usagef("--table %q: want schema.table", f.opts.Table)
	}
	return withLogin(ctx, e, f.schema, func(l *login) error {
		ctx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		f.opts.OnLockTimeout = lockWaitNote(e, "adopt")
		res, err := migrations.Adopt(ctx, l.pool, l.schema, f.opts)
		if err != nil {
			return err
		}
		if f.json {
			out := struct {
				Schema   string `json:"schema"`
				Database string `json:"database"`
				*migrations.AdoptResult
			}{l.schema, l.target, res}
			return printJSON(e.stdout, out)
		}
		p := func(format string, args ...any) { fmt.Fprintf(e.stdout, format, args...) }
		if len(res.Migrated) > 0 {
			p("schema %s on %s: applied %d migrations first\n", l.schema, l.target, len(res.Migrated))
		}
		p("adopted %s: its %d rows are now in %s; inserts into %s publish to %s.events\n", res.View, res.LegacyRows, res.Archive, res.View, l.schema)
		p("the outbox's sequences continue after %d (the last old id); consumer %s starts there\n\n", res.SwitchAt, res.Consumer)
		p("next:\n")
		p("  1. let the old relay drain the old rows through %s, unchanged; retire it once\n", res.View)
		p("     every one is sent (a relay that marks rows: none left unmarked; one that polls\n")
		p("     id > last: last at %d or above, legacy_max_id)\n", res.LegacyMaxID)
		p("  2. start outboxkeeper's relay (consumer %s)\n", res.Consumer)
		p("  3. set up the application's role for the read side if it consumes: SELECT %s.grant_writer('<role>')\n", l.schema)
		return nil
	})
}
