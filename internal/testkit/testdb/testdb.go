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
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/dburl"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

// Schema is the outbox schema of every test database.
const Schema = store.DefaultSchema

// DB is one test's database.
type DB struct {
	Name string
	// URL is the connection string the code under test gets: directly to
	// the server, or through PgBouncer in transaction mode when
	// OUTBOXKEEPER_TEST_VIA=pgbouncer (the functions' tests run both ways).
	URL string
	// DirectURL always reaches the server itself: for what a transaction
	// pooler cannot carry (LISTEN, a session held open on purpose).
	DirectURL string
	// Pool is a pool on URL with the functions' own settings (internal/pg:
	// the pooler-safe query mode), sized for tests.
	Pool   *pgxpool.Pool
	Schema store.Schema
}

// ViaVar names the variable that routes the code under test through
// PgBouncer; ViaPgBouncer is its value for that.
const (
	ViaVar       = "OUTBOXKEEPER_TEST_VIA"
	ViaPgBouncer = "pgbouncer"
)

// testPoolSize: tests run writers and passes side by side on one pool,
// unlike a function's two connections.
const testPoolSize = 10

// template is one cluster's migrated template database, made once per
// process.
type template struct {
	once sync.Once
	name string
	err  error
}

var templates sync.Map // admin URL -> *template

// New creates a fresh migrated database for t on the local stack's
// cluster (DATABASE_URL) and drops it afterwards.
func New(t testing.TB) *DB {
	t.Helper()
	return newOn(t, testenv.Require(t, "DATABASE_URL"), true)
}

// NewOn is New on the cluster adminURL names (a superuser's login to one
// of its databases), which a test started itself (internal/testkit/testcluster):
// always straight to that server, never through PgBouncer.
func NewOn(t testing.TB, adminURL string) *DB {
	t.Helper()
	return newOn(t, adminURL, false)
}

func newOn(t testing.TB, adminURL string, mayPool bool) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	v, _ := templates.LoadOrStore(adminURL, &template{})
	tmpl := v.(*template)
	tmpl.once.Do(func() { tmpl.name, tmpl.err = ensureTemplate(ctx, adminURL) })
	if tmpl.err != nil {
		t.Fatalf("testdb: template database: %v", tmpl.err)
	}
	return create(t, adminURL, tmpl.name, mayPool)
}

// create makes a database from the template database from and drops it
// when t ends.
func create(t testing.TB, adminURL, from string, mayPool bool) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name := "okt_" + randomHex(8)
	if err := withAdmin(ctx, adminURL, func(conn *pgx.Conn) error {
		return createFrom(ctx, conn, name, from)
	}); err != nil {
		t.Fatalf("testdb: create %s: %v", name, err)
	}
	directURL, err := dburl.ForDatabase(adminURL, name)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	dbURL := directURL
	if mayPool && os.Getenv(ViaVar) == ViaPgBouncer {
		if dbURL, err = dburl.ForDatabase(testenv.Require(t, "PGBOUNCER_URL"), name); err != nil {
			t.Fatalf("testdb: %v", err)
		}
	}
	pc, err := pg.PoolConfig(ctx, pg.Login{URL: dbURL}, pg.Options{})
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	pc.MaxConns = testPoolSize
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatalf("testdb: connect %s: %v", name, err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = Drop(ctx, adminURL, name)
	})
	return &DB{Name: name, URL: dbURL, DirectURL: directURL, Pool: pool, Schema: store.MustSchema(Schema)}
}

// Seeded makes a fresh database on the stack's cluster, hands seed a
// connection of its own straight to it to fill it (a large dataset built
// once), and returns a function that makes a copy of it for each call: a
// copy is a file copy, far faster than building the rows again, so every
// arm of a benchmark can start from the same rows. Copies route through
// PgBouncer as New's do. The seed and its copies are dropped when t ends.
func Seeded(t testing.TB, seed func(ctx context.Context, conn *pgx.Conn) error) func() *DB {
	t.Helper()
	adminURL := testenv.Require(t, "DATABASE_URL")
	src := newOn(t, adminURL, false)
	// PostgreSQL copies a database only while nobody is connected to it.
	src.Pool.Close()
	conn, err := pgx.Connect(context.Background(), src.DirectURL)
	if err != nil {
		t.Fatalf("testdb: connect to the seed: %v", err)
	}
	err = seed(context.Background(), conn)
	conn.Close(context.Background())
	if err != nil {
		t.Fatalf("testdb: seed: %v", err)
	}
	return func() *DB { return create(t, adminURL, src.Name, true) }
}

// Connect opens one extra connection straight to the server, for a writer
// that must hold its own transaction (an open or rolled-back writer in a
// test) or a LISTEN, which a transaction pooler cannot carry.
func (d *DB) Connect(t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), d.DirectURL)
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

// Drop drops the database name through the server's adminURL, whoever is
// still connected to it; a database that does not exist is no error.
func Drop(ctx context.Context, adminURL, name string) error {
	return withAdmin(ctx, adminURL, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`)
		return err
	})
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

// ViaPooler says the code under test reaches the server through PgBouncer
// (OUTBOXKEEPER_TEST_VIA=pgbouncer).
func ViaPooler() bool { return os.Getenv(ViaVar) == ViaPgBouncer }

// PoolConfig is a pool configuration on URL with the functions' own
// settings (internal/pg), for a test that stands up a function's pool of
// its own: to find its sessions by applicationName, or to trace it.
func (d *DB) PoolConfig(t testing.TB, applicationName string) *pgxpool.Config {
	t.Helper()
	pc, err := pg.PoolConfig(context.Background(), pg.Login{URL: d.URL}, pg.Options{ApplicationName: applicationName})
	if err != nil {
		t.Fatalf("testdb: pool config: %v", err)
	}
	return pc
}

// NewPool opens a pool with PoolConfig's settings (the functions' two
// connections) and closes it when the test ends.
func (d *DB) NewPool(t testing.TB, applicationName string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), d.PoolConfig(t, applicationName))
	if err != nil {
		t.Fatalf("testdb: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// KillSessions terminates the server sessions whose application_name is
// app, from a connection of its own straight to the server (through a
// pooler, the statement could otherwise land on one of its victims), and
// returns how many it ended. Behind PgBouncer a server connection keeps the
// name of the last client it served, so more than one may match.
func (d *DB) KillSessions(t testing.TB, app string) int {
	t.Helper()
	var killed int
	if err := d.Connect(t).QueryRow(context.Background(),
		`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed); err != nil {
		t.Fatalf("testdb: kill sessions of %s: %v", app, err)
	}
	return killed
}

// FunctionPools are two pools with the functions' own settings
// (internal/pg: two connections, every statement unnamed) on the
// database: one straight to the server and one through PgBouncer in
// transaction mode, for a benchmark of what the pooler costs a pass.
func (d *DB) FunctionPools(t testing.TB) (direct, pooled *pgxpool.Pool) {
	t.Helper()
	viaURL, err := dburl.ForDatabase(testenv.Require(t, "PGBOUNCER_URL"), d.Name)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	open := func(url string) *pgxpool.Pool {
		pc, err := pg.PoolConfig(context.Background(), pg.Login{URL: url}, pg.Options{ApplicationName: "outboxkeeper-bench"})
		if err != nil {
			t.Fatalf("testdb: pool config: %v", err)
		}
		pool, err := pgxpool.NewWithConfig(context.Background(), pc)
		if err != nil {
			t.Fatalf("testdb: pool: %v", err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	return open(d.DirectURL), open(viaURL)
}
