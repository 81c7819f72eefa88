package pg

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testcluster"
)

// rotatingSecret is Secrets Manager's side of a rotation: the value a
// GetSecretValue returns now, which the test changes.
type rotatingSecret struct {
	mu    sync.Mutex
	value string
	reads int
}

func (s *rotatingSecret) set(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.value = v
}

func (s *rotatingSecret) GetSecretValue(context.Context, *secretsmanager.GetSecretValueInput, ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(s.value)}, nil
}

func (s *rotatingSecret) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

// A rotation against a server that checks passwords: the password changes
// in the database, then in the secret. The next new connection's login is
// refused (28P01), the pool re-reads the secret once and the statement
// succeeds; while the secret still holds the refused password, a
// statement fails with the server's error after exactly one re-read,
// never a loop of them.
func TestRotatedPasswordIsReReadOnce(t *testing.T) {
	t.Parallel()
	ca := testcluster.NewCA(t, "rotation CA")
	c := testcluster.Start(t, testcluster.Options{TLS: ca.Issue(t, "127.0.0.1")})
	c.Exec(t, `CREATE ROLE app LOGIN PASSWORD 'first-password'`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	secret := func(password string) string {
		return fmt.Sprintf(`{"username":"app","password":%q}`, password)
	}
	sm := &rotatingSecret{value: secret("first-password")}
	db := Login{SecretARN: testARN, Host: "127.0.0.1", Port: c.Port, Name: "postgres", CAPEM: string(ca.PEM)}
	pool, err := NewPool(ctx, db, Options{Secrets: sm})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	one := func() error {
		var n int
		return pool.QueryRow(ctx, `SELECT 1`).Scan(&n)
	}
	if err := one(); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	if got := sm.count(); got != 1 {
		t.Fatalf("secret read %d times at init, want 1", got)
	}

	c.Exec(t, `ALTER ROLE app PASSWORD 'second-password'`)
	sm.set(secret("second-password"))
	pool.Reset() // the warm connections stay logged in; a new one must dial
	if err := one(); err != nil {
		t.Errorf("after the rotation: %v", err)
	}
	if got := sm.count(); got != 2 {
		t.Errorf("secret read %d times, want 2 (once more after the refused login)", got)
	}

	// Every statement method dials through the re-read.
	for name, call := range map[string]func() error{
		"Exec": func() error { _, err := pool.Exec(ctx, `SELECT 1`); return err },
		"Query": func() error {
			rows, err := pool.Query(ctx, `SELECT 1`)
			if err == nil {
				rows.Close()
				err = rows.Err()
			}
			return err
		},
		"QueryRow":  one,
		"SendBatch": func() error { return pool.SendBatch(ctx, batchOfOne()).Close() },
		"Begin": func() error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			return tx.Rollback(ctx)
		},
	} {
		before := sm.count()
		password := fmt.Sprintf("%s-password", name)
		c.Exec(t, `ALTER ROLE app PASSWORD '`+password+`'`)
		sm.set(secret(password))
		pool.Reset()
		if err := call(); err != nil {
			t.Errorf("%s after a rotation: %v", name, err)
		}
		if got := sm.count() - before; got != 1 {
			t.Errorf("%s: secret re-read %d times, want 1", name, got)
		}
	}

	// The database has the new password, the secret not yet.
	c.Exec(t, `ALTER ROLE app PASSWORD 'third-password'`)
	pool.Reset()
	before := sm.count()
	if err := one(); !invalidPassword(err) {
		t.Errorf("with the secret behind the database: %v, want the server's 28P01", err)
	}
	if got := sm.count() - before; got != 1 {
		t.Errorf("secret re-read %d times for one refused login, want 1", got)
	}
	if got := pool.Stat().TotalConns(); got != 0 {
		t.Errorf("%d connections left in the pool, want none", got)
	}
}

func batchOfOne() *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(`SELECT 1`)
	return b
}
