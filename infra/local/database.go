package local

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/dburl"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

// PrepareDatabase makes database `name` on the server of adminURL and
// migrates it for schema, returning its URL. fresh drops it first (with
// FORCE, ending any leftover session of an earlier run), so a demo always
// starts from sequence 1; otherwise an existing database is kept and the
// migrations are a no-op when already applied.
func PrepareDatabase(ctx context.Context, adminURL, name, schema string, fresh bool) (string, error) {
	dbURL, err := dburl.ForDatabase(adminURL, name)
	if err != nil {
		return "", err
	}
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to DATABASE_URL: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{name}.Sanitize()
	exists := false
	if fresh {
		if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+ident+` WITH (FORCE)`); err != nil {
			return "", fmt.Errorf("drop database %s: %w", name, err)
		}
	} else if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up database %s: %w", name, err)
	}
	if !exists {
		if _, err := admin.Exec(ctx, `CREATE DATABASE `+ident); err != nil {
			return "", fmt.Errorf("create database %s: %w", name, err)
		}
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := migrate.Apply(ctx, conn, schema); err != nil {
		return "", err
	}
	return dbURL, nil
}
