package pass_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// The errors pgx v5 really returns when the server goes away under a
// statement, produced by cutting real connections (a TCP proxy between the
// client and the server, or PgBouncer), not built by hand: each must be
// Transient, or a pass fails an invocation a retry would have saved.

// cutProxy forwards TCP connections to a server; cut closes every one of
// them at once, as a crashed server's connections end, and down refuses
// new ones.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() { _ = ln.Close(); p.cut() })
	return p
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
	}
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, not a polite close
		}
		_ = c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) down() { _ = p.ln.Close() }

// via is u with its host replaced by the proxy's.
func (p *cutProxy) via(t *testing.T, u string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	parsed.Host = p.ln.Addr().String()
	return parsed.String()
}

func hostOf(t *testing.T, u string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return parsed.Host
}

// functionsPool is a pool with the functions' own settings (internal/pg)
// on url.
func functionsPool(t *testing.T, u string) *pgxpool.Pool {
	t.Helper()
	pc, err := pg.PoolConfig(context.Background(), pg.Login{URL: u}, pg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func wantTransient(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want the lost connection's", what)
		return
	}
	t.Logf("%s: %v (%T)", what, err, errors.Unwrap(err))
	if !pass.Transient(err) {
		t.Errorf("%s: Transient(%q) = false, want true", what, err)
	}
}

func TestTransientCoversEveryErrorOfALostConnection(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	// Through PgBouncer when the tests run that way: the proxy then sits
	// between the client and the pooler, as a failover cuts both.
	p := newCutProxy(t, hostOf(t, db.URL))
	u := p.via(t, db.URL)
	bounded := func(b pass.Batcher) *pass.Bounded {
		return &pass.Bounded{DB: b, Deadline: time.Now().Add(10 * time.Second)}
	}

	t.Run("a bounded statement whose connection is cut before the answer", func(t *testing.T) {
		pool := functionsPool(t, u)
		if _, err := bounded(pool).Exec(ctx, `SELECT 1`); err != nil {
			t.Fatal(err)
		}
		// pg_sleep keeps the statement in flight while the connection is
		// cut, as a crash catches one.
		errc := make(chan error, 1)
		go func() {
			var x int
			errc <- bounded(pool).QueryRow(ctx, `SELECT 1 FROM pg_sleep(2)`).Scan(&x)
		}()
		time.Sleep(300 * time.Millisecond)
		p.cut()
		wantTransient(t, "QueryRow", <-errc)
	})

	t.Run("a batch whose connection is already dead when it is sent", func(t *testing.T) {
		pool := functionsPool(t, u)
		if _, err := bounded(pool).Exec(ctx, `SELECT 1`); err != nil {
			t.Fatal(err)
		}
		p.cut() // the idle pooled connection dies; the pool does not know
		var x int
		wantTransient(t, "QueryRow after the cut", bounded(pool).QueryRow(ctx, `SELECT 1`).Scan(&x))
		_, err := bounded(pool).Exec(ctx, `SELECT 1`)
		if err != nil {
			wantTransient(t, "Exec after the cut", err)
		}
	})

	t.Run("rows cut off in the middle of a result", func(t *testing.T) {
		pool := functionsPool(t, u)
		rows, err := bounded(pool).Query(ctx, `SELECT g, repeat('x', 1000) FROM generate_series(1, 200000) g`)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			if n++; n == 10 {
				p.cut()
			}
		}
		rows.Close()
		if n >= 200000 {
			t.Fatalf("read all %d rows through a cut connection", n)
		}
		wantTransient(t, "rows.Err", rows.Err())
	})

	t.Run("a statement on a connection pgx has closed", func(t *testing.T) {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		p.cut()
		_, err = conn.Exec(ctx, `SELECT 1`) // finds the cut, closes the connection
		wantTransient(t, "the first statement", err)
		_, err = conn.Exec(ctx, `SELECT 1`)
		wantTransient(t, "the next statement", err)
	})

	t.Run("the backend terminated by the server", func(t *testing.T) {
		conn, err := pgx.Connect(ctx, db.DirectURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var pid int32
		if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		_, err = bounded(conn).Exec(ctx, `SELECT 1`)
		wantTransient(t, "a statement after pg_terminate_backend", err)
	})

	t.Run("a dial refused", func(t *testing.T) {
		p.down()
		p.cut()
		pool := functionsPool(t, u)
		_, err := bounded(pool).Exec(ctx, `SELECT 1`)
		wantTransient(t, "a statement with the server down", err)
	})
}
