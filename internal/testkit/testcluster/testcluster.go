// Package testcluster starts a PostgreSQL cluster of a test's own, for what
// the shared local stack cannot show without disturbing every other test:
// TLS with a server certificate signed by a CA the test made
// (ssl=on, plain connections refused) and password logins (scram-sha-256;
// the stack's cluster trusts everyone, so a wrong password would pass).
//
//	ca := testcluster.NewCA(t, "test CA")
//	c := testcluster.Start(t, testcluster.Options{TLS: ca.Issue(t, "localhost", "127.0.0.1")})
//	url := c.URL("postgres", c.Password, "postgres", "sslmode=verify-full")
//
// It uses the machine's initdb and pg_ctl (pg_config --bindir), as
// infra/stack does; as root the cluster runs as the postgres OS user, which
// then owns the data directory and the key file (PostgreSQL refuses a key
// that others can read). Stopped and removed when the test ends.
package testcluster

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// Options shape the cluster.
type Options struct {
	// TLS, when set, is the server's certificate and key: the cluster
	// runs with ssl=on and refuses logins that do not use TLS.
	TLS *ServerCert
	// Durable runs the cluster as production does, fsync = on and
	// synchronous_commit = on (with full_page_writes), where the local
	// stack's and other test clusters skip the flushes: for benchmarks of
	// what a commit costs.
	Durable bool
	// MaxConnections is max_connections; default 30.
	MaxConnections int
}

// Cluster is a running throwaway cluster on 127.0.0.1.
type Cluster struct {
	Port int
	// Password is the superuser postgres's.
	Password string
	dir      string
	bin      string
	owner    string // OS user running the server; "" for ourselves
}

// Start initialises and starts a cluster for t.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c := &Cluster{Password: randomHex(12)}
	out, err := exec.Command("pg_config", "--bindir").Output()
	if err != nil {
		testenv.Missing(t, "pg_config not found: the PostgreSQL server binaries are needed")
	}
	c.bin = strings.TrimSpace(string(out))
	if _, err := os.Stat(filepath.Join(c.bin, "initdb")); err != nil {
		testenv.Missing(t, "initdb not found in "+c.bin)
	}
	if os.Geteuid() == 0 {
		c.owner = "postgres"
		if _, err := user.Lookup(c.owner); err != nil {
			testenv.Missing(t, "running as root without a postgres OS user (infra/stack/up.sh creates one)")
		}
	}
	if c.dir, err = os.MkdirTemp("", "outboxkeeper-testcluster-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(t) })
	data := filepath.Join(c.dir, "data")
	c.write(t, "pwfile", []byte(c.Password+"\n"))
	c.chown(t, c.dir)
	c.run(t, "initdb", "-D", data, "-U", "postgres", "--auth=scram-sha-256", "--pwfile="+filepath.Join(c.dir, "pwfile"),
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")

	c.Port = freePort(t)
	durability := "fsync = off\n"
	if opts.Durable {
		durability = "fsync = on\nsynchronous_commit = on\nfull_page_writes = on\n"
	}
	conf := fmt.Sprintf("\nlisten_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = ''\n%smax_connections = %d\n",
		c.Port, durability, cmp.Or(opts.MaxConnections, 30))
	hba := "host all all 127.0.0.1/32 scram-sha-256\n"
	if opts.TLS != nil {
		c.write(t, "data/server.crt", opts.TLS.CertPEM)
		c.write(t, "data/server.key", opts.TLS.KeyPEM)
		conf += "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n"
		// Only TLS: a client that fell back to plain text would fail here
		// instead of passing unnoticed.
		hba = "hostssl all all 127.0.0.1/32 scram-sha-256\nhostnossl all all 127.0.0.1/32 reject\n"
	}
	c.append(t, "data/postgresql.conf", conf)
	c.write(t, "data/pg_hba.conf", []byte(hba))
	c.chown(t, c.dir)
	c.run(t, "pg_ctl", "start", "-D", data, "-l", filepath.Join(c.dir, "server.log"), "-w", "-t", "60")
	return c
}

// URL is a postgres:// URL for user on database db of the cluster; query
// is added as the URL's query (sslmode=..., and so on).
func (c *Cluster) URL(user, password, db, query string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)), Path: "/" + db, RawQuery: query}
	return u.String()
}

// Exec runs sql as the superuser, over TLS when the cluster has it
// (without verifying: this is the test's own setup, not what it tests).
func (c *Cluster) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres", c.Password, "postgres", "sslmode=prefer"))
	if err != nil {
		t.Fatalf("testcluster: connect: %v\n%s", err, c.Log())
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("testcluster: %s: %v", sql, err)
	}
}

// Crash stops the server as a crash would: pg_ctl stop -m immediate, no
// shutdown checkpoint, every connection cut at once; the next Restart
// runs crash recovery. For tests of what a client does when its server
// goes away under it, which the shared stack's cluster cannot show
// without disturbing every other test.
func (c *Cluster) Crash(t testing.TB) {
	t.Helper()
	c.run(t, "pg_ctl", "stop", "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "-t", "60")
}

// Restart starts the server again after Crash, on the same port, and
// returns once it accepts connections.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.run(t, "pg_ctl", "start", "-D", filepath.Join(c.dir, "data"), "-l", filepath.Join(c.dir, "server.log"), "-w", "-t", "60")
}

// Log is the server's log so far.
func (c *Cluster) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
	return string(b)
}

func (c *Cluster) stop(t testing.TB) {
	data := filepath.Join(c.dir, "data")
	if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err == nil {
		if out, err := c.command("pg_ctl", "stop", "-D", data, "-m", "immediate", "-w").CombinedOutput(); err != nil {
			t.Errorf("testcluster: pg_ctl stop: %v\n%s", err, out)
		}
	}
	if t.Failed() {
		t.Logf("testcluster: server log:\n%s", c.Log())
	}
	_ = os.RemoveAll(c.dir)
}

// command runs a server binary, as the postgres OS user when we are root
// (PostgreSQL refuses to run as root).
func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	bin := filepath.Join(c.bin, name)
	if c.owner == "" {
		return exec.Command(bin, args...)
	}
	cmd := exec.Command("runuser", append([]string{"-u", c.owner, "--", bin}, args...)...)
	cmd.Dir = "/" // the postgres user may not be able to enter the test's folder
	return cmd
}

func (c *Cluster) run(t testing.TB, name string, args ...string) {
	t.Helper()
	var out bytes.Buffer
	cmd := c.command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("testcluster: %s: %v\n%s\n%s", name, err, out.String(), c.Log())
	}
}

// write creates a file only its owner may read: the server refuses a key
// file others can.
func (c *Cluster) write(t testing.TB, rel string, body []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.dir, rel), body, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (c *Cluster) append(t testing.TB, rel, text string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(c.dir, rel), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

func (c *Cluster) chown(t testing.TB, dir string) {
	t.Helper()
	if c.owner == "" {
		return
	}
	if out, err := exec.Command("chown", "-R", c.owner+":", dir).CombinedOutput(); err != nil {
		t.Fatalf("testcluster: chown: %v\n%s", err, out)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
