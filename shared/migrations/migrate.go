package migrations

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Migration is one embedded file.
type Migration struct {
	// Name is the file name, "0006_roles.sql": what schema_migrations records.
	Name string
	// SQL is the file rendered for one schema.
	SQL string
	// Checksum is the SHA-256 of the file as embedded, in hex. It does not
	// depend on the schema, so the same file has the same checksum in
	// every schema and in `outboxkeeper migrate status`.
	Checksum string
	// Compatible says the file is marked CompatibleMarker: builds that
	// predate it keep working on a database that has it applied.
	Compatible bool
}

// Version is the number a migration's name starts with (6 for
// "0006_roles.sql"): the schema version it brings the database to.
func (m Migration) Version() int { return Version(m.Name) }

// Version is the leading number of a migration file name, 0 if it has none.
func Version(name string) int {
	digits := name[:len(name)-len(strings.TrimLeft(name, "0123456789"))]
	n, _ := strconv.Atoi(digits)
	return n
}

// CompatibleMarker, as a line of a migration's leading comment block,
// marks it compatible with older builds: it only adds things (a table, a
// function, a column with a default) that code written before it never
// looks at. A build that finds such migrations applied beyond its own
// still starts; one that finds an unmarked one refuses to, since the
// schema may have changed under it. Text after the marker is a reason for
// readers.
const CompatibleMarker = "outboxkeeper:compatible"

// Result says what Apply did.
type Result struct {
	Applied []string // names applied by this call
	Skipped []string // names found already applied
	// Attempts counts the transactions it took: more than 1 when an
	// attempt ran out of lock_timeout and was tried again.
	Attempts int
}

// Load returns the migrations rendered for schema, in the order they apply.
func Load(schema string) ([]Migration, error) {
	if err := store.ValidSchema(schema); err != nil {
		return nil, fmt.Errorf("migrate: schema %q: %w", schema, err)
	}
	names, err := fs.Glob(Files, "*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]Migration, 0, len(names))
	for _, name := range names {
		body, err := Files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(body)
		out = append(out, Migration{
			Name:       name,
			SQL:        Render(string(body), schema),
			Checksum:   hex.EncodeToString(sum[:]),
			Compatible: markedCompatible(string(body)),
		})
	}
	return out, nil
}

// Latest is the build's last migration: the schema version it requires.
func Latest() Migration {
	list, err := Load(store.DefaultSchema)
	if err != nil || len(list) == 0 {
		panic(fmt.Sprintf("migrate: no embedded migrations: %v", err))
	}
	return list[len(list)-1]
}

// markedCompatible looks for CompatibleMarker in the comment lines that
// open the file.
func markedCompatible(body string) bool {
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		comment, ok := strings.CutPrefix(line, "--")
		if !ok {
			return false
		}
		if strings.HasPrefix(strings.TrimSpace(comment), CompatibleMarker) {
			return true
		}
	}
	return false
}

// Render fills a migration template for schema. {{schema_name}} becomes a
// string literal with the name pasted in, which is safe only for a valid
// schema name (no quote can be in one): anything else panics, as a
// programming error.
func Render(sql, schema string) string {
	if err := store.ValidSchema(schema); err != nil {
		panic(fmt.Sprintf("migrate: Render with schema %q: %v", schema, err))
	}
	return sqltext.Render(sql, schema)
}

// Conn is what Apply needs: a single connection, since the whole run is one
// transaction.
type Conn interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// bookkeeping is the statements of schema_migrations.sql rendered for one
// schema, shared by Apply and Print so that a schema migrated by hand from
// `migrate print` is recorded exactly as one migrated by the migrator.
type bookkeeping struct {
	quoted string
	// lockTimeout is the lock_timeout statement's argument (see ApplyWith).
	lockTimeout string

	pinPath, setLockTimeout, lock string
	refuseForeign                 string
	schemaExists, columnsExist    string
	createSchema, createTable     string
	addColumns                    string
	applied, record, backfill     string
}

func newBookkeeping(schema string, lockTimeout time.Duration) bookkeeping {
	return bookkeeping{
		quoted:         pgx.Identifier{schema}.Sanitize(),
		lockTimeout:    fmt.Sprintf("%dms", max(1, lockTimeout.Milliseconds())),
		pinPath:        schemaMigrationsSQL.Statement("pin_path", schema),
		setLockTimeout: schemaMigrationsSQL.Statement("lock_timeout", schema),
		lock:           schemaMigrationsSQL.Statement("lock", schema),
		refuseForeign:  schemaMigrationsSQL.Statement("refuse_foreign_schema", schema),
		schemaExists:   schemaMigrationsSQL.Statement("schema_exists", schema),
		columnsExist:   schemaMigrationsSQL.Statement("columns_exist", schema),
		createSchema:   schemaMigrationsSQL.Statement("create_schema", schema),
		createTable:    schemaMigrationsSQL.Statement("create_table", schema),
		addColumns:     schemaMigrationsSQL.Statement("add_columns", schema),
		applied:        schemaMigrationsSQL.Statement("applied", schema),
		record:         schemaMigrationsSQL.Statement("record", schema),
		backfill:       schemaMigrationsSQL.Statement("backfill", schema),
	}
}

// lockTimeoutLiteral is setLockTimeout with its value written out, for Print.
func (b bookkeeping) lockTimeoutLiteral() string {
	return inline(b.setLockTimeout, map[string]string{"lock_timeout": literal(b.lockTimeout)})
}

// lockPreamble is how every script Print or a tool's file starts after its
// BEGIN: the pinned search path and the schema's lock behind a bounded
// wait, said to the person who reads it: what stops ("the script") and
// how it is tried again ("run").
func (b bookkeeping) lockPreamble(what, again string) string {
	return fmt.Sprintf("%s;\n"+
		"-- A lock wait is bounded: behind a long transaction %s stops (SQLSTATE 55P03,\n"+
		"-- nothing applied) instead of queueing every publisher behind it; %s it again later.\n"+
		"%s;\n%s;\n", b.pinPath, what, again, b.lockTimeoutLiteral(), b.lock)
}

// recordLiteral is record with the values written out, for Print.
func (b bookkeeping) recordLiteral(m Migration) string {
	return inline(b.record, map[string]string{
		"name": literal(m.Name), "checksum": literal(m.Checksum), "compatible": strconv.FormatBool(m.Compatible),
	})
}

// backfillLiteral is backfill with the values written out, for Print.
func (b bookkeeping) backfillLiteral(done []Migration) string {
	names, sums := make([]string, len(done)), make([]string, len(done))
	for i, m := range done {
		names[i], sums[i] = literal(m.Name), literal(m.Checksum)
	}
	return inline(b.backfill, map[string]string{
		"names":     "ARRAY[" + strings.Join(names, ", ") + "]",
		"checksums": "ARRAY[" + strings.Join(sums, ", ") + "]",
	})
}

// namedArg is an argument of a statement of ours (@name, pgx.NamedArgs).
var namedArg = regexp.MustCompile(`@([A-Za-z_][A-Za-z0-9_]*)`)

// inline writes the literals in place of sql's named arguments, for a
// script; an argument without one is a programming error.
func inline(sql string, literals map[string]string) string {
	return namedArg.ReplaceAllStringFunc(sql, func(arg string) string {
		v, ok := literals[arg[1:]]
		if !ok {
			panic(fmt.Sprintf("migrate: no literal for %s in %q", arg, sql))
		}
		return v
	})
}

// literal quotes s as an SQL string literal. Only file names and hex
// checksums reach it, but it quotes properly all the same.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// ChangedError is an applied migration whose file differs from the one
// that was applied: the database's schema is not what this build's files
// describe. Applied files must never change; a change is a new migration.
type ChangedError struct {
	Schema   string
	Name     string
	Recorded string // checksum recorded when it was applied
	Build    string // checksum of this build's file
}

func (e *ChangedError) Error() string {
	return fmt.Sprintf("migrate: %s in schema %s was changed after it was applied (recorded sha256 %s, this build's %s): "+
		"restore the file as it was applied and put the change in a new migration", e.Name, e.Schema, short(e.Recorded), short(e.Build))
}

// short abbreviates a checksum for messages and tables, as git does.
func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

// SchemaTakenError is a schema of the outbox's name that outboxkeeper did
// not make: it holds other objects and no schema_migrations of ours. The
// migrator changes nothing in it.
type SchemaTakenError struct {
	// Message is the server's, naming the schema, the database and what
	// the schema holds.
	Message string
	Hint    string
}

func (e *SchemaTakenError) Error() string { return "migrate: " + e.Message + ". " + e.Hint }

// asSchemaTaken turns refuse_foreign_schema's refusal (duplicate_schema)
// into a *SchemaTakenError, and wraps anything else.
func asSchemaTaken(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P06" {
		return &SchemaTakenError{Message: pgErr.Message, Hint: pgErr.Hint}
	}
	return fmt.Errorf("migrate: check schema: %w", err)
}

// The defaults of ApplyOptions.
const (
	// DefaultLockTimeout bounds each lock wait of an attempt. A migration
	// waiting for a lock queues every later request for a conflicting one
	// behind it: while it waits behind a long transaction, publishers wait
	// behind it. Bounded, they wait at most this long, then get through
	// while the migrator rolls back and pauses.
	DefaultLockTimeout = time.Second
	// DefaultRetryInterval is the first pause after an attempt that ran
	// out of lock_timeout; it doubles up to maxRetryInterval.
	DefaultRetryInterval = time.Second
	// DefaultBudget bounds Apply when its context has no deadline.
	DefaultBudget = 2 * time.Minute
)

const maxRetryInterval = 10 * time.Second

// ApplyOptions shape Apply's waiting; a zero field means its default.
type ApplyOptions struct {
	// LockTimeout is every attempt's lock_timeout.
	LockTimeout time.Duration
	// RetryInterval is the pause after the first attempt that timed out.
	RetryInterval time.Duration
	// OnLockTimeout, when set, hears of each attempt that timed out
	// before the pause that follows it (for a log line).
	OnLockTimeout func(*LockError, time.Duration)
}

func (o ApplyOptions) withDefaults() ApplyOptions {
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	return o
}

// LockError is a migration that could not get a lock within
// lock_timeout on any attempt its budget allowed: a long transaction holds
// a lock it needs. Nothing was applied.
type LockError struct {
	Schema string
	// Step is what waited: a migration's file name, or the migrator's
	// own bookkeeping.
	Step        string
	Attempts    int
	LockTimeout time.Duration
	// Err is the last attempt's error (SQLSTATE 55P03).
	Err error
}

func (e *LockError) Error() string {
	return fmt.Sprintf("migrate: %s in schema %s waited longer than lock_timeout %s for a lock on each of %d %s, and the time for migrating ran out; "+
		"nothing was applied. A long transaction holds a lock it needs: find it in pg_stat_activity (the oldest xact_start) and end it, "+
		"or migrate again once it has ended: %v", e.Step, e.Schema, e.LockTimeout, e.Attempts, plural(e.Attempts, "attempt", "attempts"), e.Err)
}

func (e *LockError) Unwrap() error { return e.Err }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Apply brings schema up to date in one transaction and records each
// migration with its checksum, with the default ApplyOptions.
func Apply(ctx context.Context, conn Conn, schema string) (Result, error) {
	return ApplyWith(ctx, conn, schema, ApplyOptions{})
}

// ApplyWith brings schema up to date in one transaction and records each
// migration with its checksum. It refuses, changing nothing, when an
// applied migration's file differs from this build's (*ChangedError).
//
// Every lock wait is bounded by lock_timeout: an attempt that runs out
// rolls back, pauses so that the statements queued behind it get through,
// and tries again, for as long as ctx's deadline (or DefaultBudget) leaves
// time for another attempt; then it returns a *LockError.
//
// Two migrators started at the same moment serialise on a transaction-level
// advisory lock keyed by the schema name: the second waits (and retries),
// then sees every migration recorded and applies nothing. A
// transaction-level lock (not a session one) ends with the transaction, so
// nothing is left behind on a pooled connection. Migrations are run by
// operators, the deploy-time custom resource and tests, never by the
// passes, so this is the one place outboxkeeper takes an advisory lock.
func ApplyWith(ctx context.Context, conn Conn, schema string, opts ApplyOptions) (Result, error) {
	opts = opts.withDefaults()
	list, err := Load(schema)
	if err != nil {
		return Result{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultBudget)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	b := newBookkeeping(schema, opts.LockTimeout)
	pause := opts.RetryInterval
	for attempt := 1; ; attempt++ {
		res, step, err := applyOnce(ctx, conn, schema, list, b)
		if err == nil || !pass.IsLockTimeout(err) || ctx.Err() != nil {
			res.Attempts = attempt
			return res, err
		}
		lerr := &LockError{Schema: schema, Step: step, Attempts: attempt, LockTimeout: opts.LockTimeout, Err: err}
		// Another attempt needs the pause and at least one lock wait.
		if time.Until(deadline) < pause+opts.LockTimeout {
			return Result{Attempts: attempt}, lerr
		}
		if opts.OnLockTimeout != nil {
			opts.OnLockTimeout(lerr, pause)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return Result{Attempts: attempt}, lerr
		case <-t.C:
		}
		pause = min(2*pause, maxRetryInterval)
	}
}

// applyOnce is one attempt, in one transaction; step names what it was
// doing when it failed.
func applyOnce(ctx context.Context, conn Conn, schema string, list []Migration, b bookkeeping) (res Result, step string, err error) {
	step = "the migrator's bookkeeping"
	tx, err := conn.Begin(ctx)
	if err != nil {
		return res, step, fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit

	if lockStep, err := b.prepare(ctx, tx); err != nil {
		return res, cmp.Or(lockStep, step), err
	}
	recorded, err := b.recorded(ctx, tx)
	if err != nil {
		return res, step, err
	}
	applied := map[string]*string{}
	for _, r := range recorded {
		applied[r.Name] = r.Checksum
	}
	var names, sums []string
	for _, m := range list {
		names, sums = append(names, m.Name), append(sums, m.Checksum)
		sum, done := applied[m.Name]
		if done && sum != nil && *sum != m.Checksum {
			return Result{}, step, &ChangedError{Schema: schema, Name: m.Name, Recorded: *sum, Build: m.Checksum}
		}
	}
	if _, err := tx.Exec(ctx, b.backfill, pgx.StrictNamedArgs{"names": names, "checksums": sums}); err != nil {
		return res, step, fmt.Errorf("migrate: record checksums: %w", err)
	}
	for _, m := range list {
		if _, done := applied[m.Name]; done {
			res.Skipped = append(res.Skipped, m.Name)
			continue
		}
		// Simple protocol: a migration holds several statements.
		if _, err := tx.Exec(ctx, m.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			return Result{}, m.Name, fmt.Errorf("migrate: apply %s: %w", m.Name, err)
		}
		if _, err := tx.Exec(ctx, b.record, pgx.StrictNamedArgs{"name": m.Name, "checksum": m.Checksum, "compatible": m.Compatible}); err != nil {
			return Result{}, m.Name, fmt.Errorf("migrate: record %s: %w", m.Name, err)
		}
		res.Applied = append(res.Applied, m.Name)
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{}, step, fmt.Errorf("migrate: commit: %w", err)
	}
	return res, step, nil
}

// prepare starts an attempt's transaction: the pinned path, the lock
// timeout, the migrators' lock, and the bookkeeping table as this build
// records it. A wait for the migrators' lock names itself as the step.
func (b bookkeeping) prepare(ctx context.Context, tx pgx.Tx) (lockStep string, err error) {
	if _, err := tx.Exec(ctx, b.pinPath); err != nil {
		return "", fmt.Errorf("migrate: pin search_path: %w", err)
	}
	if _, err := tx.Exec(ctx, b.setLockTimeout, pgx.StrictNamedArgs{"lock_timeout": b.lockTimeout}); err != nil {
		return "", fmt.Errorf("migrate: set lock_timeout: %w", err)
	}
	if _, err := tx.Exec(ctx, b.lock); err != nil {
		return "the migrators' advisory lock (another migrator is running)", fmt.Errorf("migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, b.refuseForeign); err != nil {
		return "", asSchemaTaken(err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, b.schemaExists).Scan(&exists); err != nil {
		return "", fmt.Errorf("migrate: look up schema: %w", err)
	}
	if !exists {
		if _, err := tx.Exec(ctx, b.createSchema); err != nil {
			return "", fmt.Errorf("migrate: create schema: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, b.createTable); err != nil {
		return "", fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	if err := tx.QueryRow(ctx, b.columnsExist).Scan(&exists); err != nil {
		return "", fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	if !exists {
		if _, err := tx.Exec(ctx, b.addColumns); err != nil {
			return "", fmt.Errorf("migrate: upgrade schema_migrations: %w", err)
		}
	}
	return "", nil
}

// appliedRow is a schema_migrations row as Apply reads it.
type appliedRow struct {
	Name     string
	Checksum *string
}

// recorded reads what the schema has applied.
func (b bookkeeping) recorded(ctx context.Context, tx pgx.Tx) ([]appliedRow, error) {
	rows, err := store.Rows(ctx, tx, b.applied, nil, pgx.RowToStructByPos[appliedRow])
	if err != nil {
		return nil, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	return rows, nil
}
