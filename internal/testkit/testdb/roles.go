package testdb

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// Role is a login role of the test cluster, set up in one test database
// the way a user sets up theirs, for tests of what it may and may not do.
type Role struct {
	Name     string
	Password string
	// URL is the test database, logged in as the role.
	URL string
	// Pool is logged in as the role.
	Pool *pgxpool.Pool
}

// Writer is a new login role set up with <schema>.grant_writer, as an
// application's role is (docs/design.md §2 "Roles").
func (d *DB) Writer(t testing.TB) *Role { return d.NewRole(t, "grant_writer") }

// Maintainer is a new login role set up with <schema>.grant_maintainer, as
// the functions' role is.
func (d *DB) Maintainer(t testing.TB) *Role { return d.NewRole(t, "grant_maintainer") }

// Operator is a new login role set up with <schema>.grant_operator, as a
// person on call's is.
func (d *DB) Operator(t testing.TB) *Role { return d.NewRole(t, "grant_operator") }

// NewRole creates a login role with a password and runs each of the
// schema's grant functions named in grants (grant_writer,
// grant_maintainer, grant_operator) for it as the schema's owner. Roles belong to the
// whole cluster, so the name is unique per call; the role's privileges
// and the role itself are dropped when the test ends.
func (d *DB) NewRole(t testing.TB, grants ...string) *Role {
	t.Helper()
	adminURL := testenv.Require(t, "DATABASE_URL")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := &Role{Name: "okt_role_" + randomHex(6), Password: randomHex(12)}
	ident := pgx.Identifier{r.Name}.Sanitize()
	if err := withAdmin(ctx, adminURL, func(conn *pgx.Conn) error {
		// The password is random hex: nothing in it needs quoting.
		_, err := conn.Exec(ctx, `CREATE ROLE `+ident+` LOGIN PASSWORD '`+r.Password+`'`)
		return err
	}); err != nil {
		t.Fatalf("testdb: create role: %v", err)
	}
	t.Cleanup(func() { d.dropRole(t, adminURL, r) })
	for _, fn := range grants {
		if err := d.underACLLock(ctx, `SELECT `+d.Schema.Table(fn)+`($1)`, r.Name); err != nil {
			t.Fatalf("testdb: %s(%s): %v", fn, r.Name, err)
		}
	}
	u, err := url.Parse(d.URL)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	u.User = url.UserPassword(r.Name, r.Password)
	r.URL = u.String()
	if r.Pool, err = pgxpool.New(ctx, r.URL); err != nil {
		t.Fatalf("testdb: connect as %s: %v", r.Name, err)
	}
	return r
}

// Connect opens one connection as the role, for a test that holds its own
// transaction.
func (r *Role) Connect(t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), r.URL)
	if err != nil {
		t.Fatalf("testdb: connect as %s: %v", r.Name, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// dropRole undoes NewRole: DROP ROLE refuses while the role holds a
// privilege in any database, so its grants in the test database go first
// (DROP OWNED BY revokes them), and its sessions end before that.
func (d *DB) dropRole(t testing.TB, adminURL string, r *Role) {
	if r.Pool != nil {
		r.Pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ident := pgx.Identifier{r.Name}.Sanitize()
	err := withAdmin(ctx, adminURL, func(conn *pgx.Conn) error {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)`, r.Name).Scan(&exists); err != nil || !exists {
			return err // a test may drop its role itself
		}
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, r.Name); err != nil {
			return err
		}
		if err := d.underACLLock(ctx, `DROP OWNED BY `+ident); err != nil {
			return fmt.Errorf("drop owned by %s: %w", r.Name, err)
		}
		_, err := conn.Exec(ctx, `DROP ROLE IF EXISTS `+ident)
		return err
	})
	if err != nil {
		t.Errorf("testdb: drop role %s: %v", r.Name, err)
	}
}

// underACLLock runs one GRANT- or REVOKE-like statement while holding the
// test database's ACL lock. Parallel subtests granting on the same tables
// rewrite the same catalog rows, and PostgreSQL answers the loser of that
// race with "tuple concurrently updated" rather than waiting.
func (d *DB) underACLLock(ctx context.Context, sql string, args ...any) error {
	return pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('outboxkeeper.testdb.acl'))`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql, args...)
		return err
	})
}
