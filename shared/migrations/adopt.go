package migrations

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

//go:embed adopt.sql
var adoptFile embed.FS

// adoptSQL are the statements of Adopt.
var adoptSQL = sqltext.MustParse(adoptFile, "adopt.sql")

// DefaultAdoptConsumer is the consumer Adopt registers at the switch: the
// relay's (relay:<RELAY_NAME>, RELAY_NAME default).
const DefaultAdoptConsumer = "relay:default"

// AdoptOptions say which table to adopt and how its columns map to an
// event's (docs/adopting.md). Empty fields take the defaults.
type AdoptOptions struct {
	// Table is the outbox table to adopt, "schema.table" or "table" (in
	// public). Required.
	Table string
	// PayloadColumn holds the event's JSON (jsonb, json, or text with a
	// JSON document); default "payload".
	PayloadColumn string
	// TopicColumn holds the event's topic; default "topic". Topic, when
	// set, is every event's topic instead.
	TopicColumn string
	Topic       string
	// HeadersColumn (jsonb or json) and the routing columns are optional.
	HeadersColumn       string
	AggregateTypeColumn string
	AggregateIDColumn   string
	EventTypeColumn     string
	// Consumer is registered at the switch; default DefaultAdoptConsumer.
	Consumer string
	// ArchiveAs is the old table's new name, in its schema; default
	// "<table>_legacy".
	ArchiveAs string
	// LockTimeout and RetryInterval bound the waits, as ApplyOptions's do.
	LockTimeout   time.Duration
	RetryInterval time.Duration
	// OnLockTimeout hears of each attempt that waited too long.
	OnLockTimeout func(*LockError, time.Duration)
}

// AdoptResult is what Adopt did.
type AdoptResult struct {
	// Migrated are the migrations applied first (none when the schema was
	// up to date).
	Migrated []string `json:"migrated"`
	// View is the old name, now a view whose inserts publish; Archive the
	// old table under its new name, with every row it had.
	View    string `json:"view"`
	Archive string `json:"archive"`
	// IDColumn is the old table's id; LegacyMaxID its highest value, what
	// a relay that polls `id > last` has sent once it reaches it.
	IDColumn    string `json:"id_column"`
	LegacyMaxID int64  `json:"legacy_max_id"`
	// SwitchAt is the last old id (N): the outbox's sequences continue
	// after it, and Consumer starts there.
	SwitchAt   int64  `json:"switch_at"`
	Consumer   string `json:"consumer"`
	LegacyRows int64  `json:"legacy_rows"`
	Attempts   int    `json:"attempts"`
}

// SplitTable reads "schema.table" or "table" (in public) as a quoted,
// qualified name.
func SplitTable(name string) (string, error) {
	schema, table, ok := strings.Cut(name, ".")
	if !ok {
		schema, table = "public", name
	}
	if schema == "" || table == "" || strings.Contains(table, ".") {
		return "", fmt.Errorf("adopt: table %q: want schema.table or table", name)
	}
	return pgx.Identifier{schema, table}.Sanitize(), nil
}

// Adopt moves an application's outbox table under outboxkeeper: it
// applies the migrations to schema (refusing a schema of that name that
// outboxkeeper did not make, *SchemaTakenError), then runs the switch,
// <schema>.adopt(), in one transaction. Behind a long transaction on the
// old table the switch waits at most LockTimeout an attempt, rolls back so
// the application's inserts get through, and tries again while ctx's
// deadline (or DefaultBudget) allows; nothing changes on a failed attempt.
func Adopt(ctx context.Context, conn Conn, schema string, opts AdoptOptions) (*AdoptResult, error) {
	table, err := SplitTable(opts.Table)
	if err != nil {
		return nil, err
	}
	if err := store.ValidSchema(schema); err != nil {
		return nil, fmt.Errorf("adopt: schema %q: %w", schema, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultBudget)
		defer cancel()
	}
	if err := adoptTableExists(ctx, conn, schema, table); err != nil {
		return nil, err
	}
	applied, err := ApplyWith(ctx, conn, schema, ApplyOptions{LockTimeout: opts.LockTimeout, RetryInterval: opts.RetryInterval, OnLockTimeout: opts.OnLockTimeout})
	if err != nil {
		return nil, err
	}
	named := pgx.StrictNamedArgs{
		"table": table, "payload_column": orDefault(opts.PayloadColumn, "payload"),
		"topic_column": orDefault(opts.TopicColumn, "topic"), "topic": orNil(opts.Topic),
		"headers_column": orNil(opts.HeadersColumn), "aggregate_type_column": orNil(opts.AggregateTypeColumn),
		"aggregate_id_column": orNil(opts.AggregateIDColumn), "event_type_column": orNil(opts.EventTypeColumn),
		"consumer": orDefault(opts.Consumer, DefaultAdoptConsumer), "archive_as": orNil(opts.ArchiveAs),
	}
	stmt := adoptSQL.Statement("adopt", schema)
	wait := ApplyOptions{LockTimeout: opts.LockTimeout, RetryInterval: opts.RetryInterval}.withDefaults()
	b := newBookkeeping(schema, wait.LockTimeout)
	deadline, _ := ctx.Deadline()
	pause := wait.RetryInterval
	for attempt := 1; ; attempt++ {
		res, err := adoptOnce(ctx, conn, b, stmt, named)
		if err == nil {
			res.Migrated, res.Attempts = applied.Applied, attempt
			return res, nil
		}
		if !pass.IsLockTimeout(err) || ctx.Err() != nil {
			return nil, err
		}
		lerr := &LockError{Schema: schema, Step: "adopt " + table, Attempts: attempt, LockTimeout: wait.LockTimeout, Err: err}
		if time.Until(deadline) < pause+wait.LockTimeout {
			return nil, lerr
		}
		if opts.OnLockTimeout != nil {
			opts.OnLockTimeout(lerr, pause)
		}
		select {
		case <-ctx.Done():
			return nil, lerr
		case <-time.After(pause):
		}
		pause = min(2*pause, maxRetryInterval)
	}
}

func adoptTableExists(ctx context.Context, conn Conn, schema, table string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("adopt: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	var exists bool
	if err := tx.QueryRow(ctx, adoptSQL.Statement("table_exists", schema), pgx.StrictNamedArgs{"table": table}).Scan(&exists); err != nil {
		return fmt.Errorf("adopt: look up %s: %w", table, err)
	}
	if !exists {
		return fmt.Errorf("adopt: there is no table %s in this database; nothing was changed", table)
	}
	return nil
}

// adoptOnce is one attempt of the switch, in one transaction bounded by
// lock_timeout.
func adoptOnce(ctx context.Context, conn Conn, b bookkeeping, stmt string, named pgx.StrictNamedArgs) (*AdoptResult, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("adopt: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, b.setLockTimeout, pgx.StrictNamedArgs{"lock_timeout": b.lockTimeout}); err != nil {
		return nil, fmt.Errorf("adopt: set lock_timeout: %w", err)
	}
	var raw []byte
	if err := tx.QueryRow(ctx, stmt, named).Scan(&raw); err != nil {
		return nil, fmt.Errorf("adopt: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("adopt: commit: %w", err)
	}
	var res AdoptResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("adopt: its answer %s: %w", raw, err)
	}
	return &res, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}
