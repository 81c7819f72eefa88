// Package testdb gives each integration test a fresh database of its own,
// cloned from a template database that is migrated once per migration set:
// cloning is a file copy, far faster than migrating every time, and tests
// can run in parallel without seeing each other's rows.
package testdb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	migrate "github.com/outboxkeeper/outboxkeeper/infra/sql"
	"github.com/outboxkeeper/outboxkeeper/internal/dburl"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testenv"
)

// Schema is the outbox schema of every test database.
const Schema = store.DefaultSchema

// DB is one test's database.
type DB struct {
	Name   string
	URL    string // connection string for this database, for subprocesses
	Pool   *pgxpool.Pool
	Schema store.Schema
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// New creates a fresh migrated database for t and drops it afterwards.
func New(t testing.TB) *DB {
	t.Helper()
	adminURL := testenv.Require(t, "DATABASE_URL")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	templateOnce.Do(func() { templateName, templateErr = ensureTemplate(ctx, adminURL) })
	if templateErr != nil {
		t.Fatalf("testdb: template database: %v", templateErr)
	}

	name := "okt_" + randomHex(8)
	if err := withAdmin(ctx, adminURL, func(conn *pgx.Conn) error {
		return createFrom(ctx, conn, name, templateName)
	}); err != nil {
		t.Fatalf("testdb: create %s: %v", name, err)
	}
	dbURL, err := dburl.ForDatabase(adminURL, name)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatalf("testdb: connect %s: %v", name, err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = withAdmin(ctx, adminURL, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`)
			return err
		})
	})
	return &DB{Name: name, URL: dbURL, Pool: pool, Schema: store.MustSchema(Schema)}
}

// Connect opens one extra connection to the test database, for a writer that
// must hold its own transaction (an open or rolled-back writer in a test).
func (d *DB) Connect(t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), d.URL)
	if err != nil {
		t.Fatalf("testdb: connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// ensureTemplate creates and migrates the template for the current
// migration set once, across every test process: `go test ./...` runs
// packages in parallel processes, so an advisory lock on the admin
// connection serialises the first creation.
func ensureTemplate(ctx context.Context, adminURL string) (string, error) {
	migrations, err := migrate.Load(Schema)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range migrations {
		fmt.Fprintf(h, "%s\n%s\n", m.Name, m.SQL)
	}
	name := "okt_template_" + hex.EncodeToString(h.Sum(nil))[:12]

	err = withAdmin(ctx, adminURL, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('outboxkeeper.testdb'))`); err != nil {
			return err
		}
		defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtext('outboxkeeper.testdb'))`) //nolint:errcheck
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		building := name + "_building"
		if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{building}.Sanitize()+` WITH (FORCE)`); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{building}.Sanitize()); err != nil {
			return err
		}
		buildURL, err := dburl.ForDatabase(adminURL, building)
		if err != nil {
			return err
		}
		tconn, err := pgx.Connect(ctx, buildURL)
		if err != nil {
			return err
		}
		_, err = migrate.Apply(ctx, tconn, Schema)
		tconn.Close(ctx)
		if err != nil {
			return err
		}
		// Renamed only once complete, so a crash mid-migration never leaves
		// a half-built template under the real name.
		_, err = conn.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{building}.Sanitize()+` RENAME TO `+pgx.Identifier{name}.Sanitize())
		return err
	})
	return name, err
}

// createFrom clones the template. PostgreSQL refuses a clone while another
// session is connected to the template (55006); that is brief, so retry.
func createFrom(ctx context.Context, conn *pgx.Conn, name, template string) error {
	for {
		_, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()+` TEMPLATE `+pgx.Identifier{template}.Sanitize())
		var pgErr *pgconn.PgError
		if err == nil || !(errors.As(err, &pgErr) && pgErr.Code == "55006") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func withAdmin(ctx context.Context, adminURL string, fn func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to DATABASE_URL: %w", err)
	}
	defer conn.Close(context.Background())
	return fn(conn)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
