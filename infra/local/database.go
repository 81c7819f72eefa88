package local

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/shared/migrate"
)

// PrepareDatabase makes database `name` on the server of adminURL and
// migrates it for schema, returning its URL. fresh drops it first (with
// FORCE, ending any leftover session of an earlier run), so a demo always
// starts from sequence 1; otherwise an existing database is kept and the
// migrations are a no-op when already applied.
func PrepareDatabase(ctx context.Context, adminURL, name, schema string, fresh bool) (string, error) {
	dbURL, err := WithDatabase(adminURL, name)
	if err != nil {
		return "", err
	}
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to DATABASE_URL: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{name}.Sanitize()
	if fresh {
		if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+ident+` WITH (FORCE)`); err != nil {
			return "", fmt.Errorf("drop database %s: %w", name, err)
		}
	}
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
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

// WithDatabase returns the postgres:// URL adminURL pointing at database name.
func WithDatabase(adminURL, name string) (string, error) {
	u, err := url.Parse(adminURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("DATABASE_URL must be a postgres:// URL")
	}
	u.Path = "/" + name
	return u.String(), nil
}
