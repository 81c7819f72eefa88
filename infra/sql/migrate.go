package migrations

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// Migration is one embedded file.
type Migration struct {
	Name string
	SQL  string
}

// Result says what Apply did.
type Result struct {
	Applied []string // names applied by this call
	Skipped []string // names found already applied
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
		out = append(out, Migration{Name: name, SQL: Render(string(body), schema)})
	}
	return out, nil
}

// Render fills a migration template for schema (already validated).
func Render(sql, schema string) string {
	return strings.NewReplacer(
		"{{schema}}", pgx.Identifier{schema}.Sanitize(),
		"{{schema_name}}", "'"+schema+"'",
	).Replace(sql)
}

// Conn is what Apply needs: a single connection, since the whole run is one
// transaction.
type Conn interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Apply brings schema up to date in one transaction.
//
// Two migrators started at the same moment serialise on a transaction-level
// advisory lock keyed by the schema name: the second waits, then sees every
// migration recorded and applies nothing. A transaction-level lock (not a
// session one) ends with the transaction, so nothing is left behind on a
// pooled connection. Migrations are run by operators and tests, never by the
// functions, so this is the one place outboxkeeper takes an advisory lock.
func Apply(ctx context.Context, conn Conn, schema string) (Result, error) {
	var res Result
	list, err := Load(schema)
	if err != nil {
		return res, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit

	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('outboxkeeper.migrate'), hashtext($1))`, schema); err != nil {
		return res, fmt.Errorf("migrate: lock: %w", err)
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+quoted); err != nil {
		return res, fmt.Errorf("migrate: create schema: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+quoted+`.schema_migrations (
		name       text PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return res, fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	applied := map[string]bool{}
	rows, err := tx.Query(ctx, `SELECT name FROM `+quoted+`.schema_migrations`)
	if err != nil {
		return res, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return res, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	for _, n := range names {
		applied[n] = true
	}
	for _, m := range list {
		if applied[m.Name] {
			res.Skipped = append(res.Skipped, m.Name)
			continue
		}
		// Simple protocol: a migration holds several statements.
		if _, err := tx.Exec(ctx, m.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			return Result{}, fmt.Errorf("migrate: apply %s: %w", m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+quoted+`.schema_migrations (name) VALUES ($1)`, m.Name); err != nil {
			return Result{}, fmt.Errorf("migrate: record %s: %w", m.Name, err)
		}
		res.Applied = append(res.Applied, m.Name)
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{}, fmt.Errorf("migrate: commit: %w", err)
	}
	return res, nil
}
