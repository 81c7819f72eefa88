// Command migrate applies the embedded migrations to DATABASE_URL
// (OUTBOX_SCHEMA, default "outbox"). `make migrate` runs it.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	migrate "github.com/outboxkeeper/outboxkeeper/infra/sql"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(1)
	}
}

func run() error {
	db, err := config.LoadDatabase(config.Environment())
	if err != nil {
		return err
	}
	if db.URL == "" {
		return fmt.Errorf("config: DATABASE_URL: migrate needs a connection string")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	res, err := migrate.Apply(ctx, conn, db.Schema)
	if err != nil {
		return err
	}
	fmt.Printf("schema %q: applied %d, already applied %d\n", db.Schema, len(res.Applied), len(res.Skipped))
	for _, name := range res.Applied {
		fmt.Println("  applied", name)
	}
	return nil
}
