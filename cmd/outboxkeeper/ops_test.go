package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// The operator's commands against the real local stack: PostgreSQL (a
// fresh database per test, the functions' passes run for real) and the
// fauxqs SQS emulator. Here: the helpers, help pages and usage errors;
// each command's behaviour in status_test.go, dead_test.go and
// skipstall_test.go.

func quiet() *slog.Logger { return slog.New(slog.NewJSONHandler(io.Discard, nil)) }

// fillPass runs one bounded fill pass, as a scheduled invocation would
// (no grace: the tests make their stalls on purpose).
func fillPass(t *testing.T, db *testdb.DB) *fill.Result {
	t.Helper()
	s, err := fill.New(db.Pool, fill.Config{Grace: fill.NoGrace, Bounded: true, PassBudget: 700 * time.Millisecond, Tick: 50 * time.Millisecond},
		fill.Options{Logger: quiet(), Metrics: &metrics.Emitter{Function: "fill", Out: io.Discard}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("fill pass: %v", err)
	}
	return res
}

// sweepPass runs one sweep pass, so sweep_state says it runs.
func sweepPass(t *testing.T, db *testdb.DB) {
	t.Helper()
	s, err := sweep.New(db.Pool, sweep.Config{}, sweep.Options{Logger: quiet(), Metrics: &metrics.Emitter{Function: "sweep", Out: io.Discard}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunOnce(context.Background()); err != nil {
		t.Fatalf("sweep pass: %v", err)
	}
}

func publish(t *testing.T, db *testdb.DB) int64 {
	t.Helper()
	return testdb.Scalar[int64](t, db.Pool, `SELECT outbox.publish('t', '{}')`)
}

func wantCode(t *testing.T, what string, got, want int, out, errs string) {
	t.Helper()
	if got != want {
		t.Errorf("%s exits %d, want %d\nstdout:\n%s\nstderr:\n%s", what, got, want, out, errs)
	}
}

func wantIn(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s does not say %q:\n%s", what, w, text)
		}
	}
}

// Every help page teaches: what the command does and how to log in.
func TestOperatorHelpPagesTeach(t *testing.T) {
	for _, c := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"--help"}, []string{"status", "dead", "dlq", "skip-stall", "migrate"}},
		{[]string{"status", "--help"}, []string{"BLOCKED BY", "Exit status 3", "fill-silent", "proof-blocked", "health check", "ROLLBACK_DLQ_URL"}},
		{[]string{"dead", "--help"}, []string{"list", "retry", "SWEEP_MAX_REDELIVERIES"}},
		{[]string{"dead", "retry", "--help"}, []string{"redeliveries 0", "compare-and-set", "--older-than"}},
		{[]string{"dlq", "--help"}, []string{"error", "redrive", "idempotent"}},
		{[]string{"dlq", "list", "--help"}, []string{"no peek", "receive", "count by one"}},
		{[]string{"dlq", "redrive", "--help"}, []string{"--dry-run", "parser compensate uses"}},
		{[]string{"skip-stall", "--help"}, []string{"--yes", "stall_skips", "duplicate key", "grant_operator", "ON CONFLICT DO NOTHING"}},
	} {
		what := strings.Join(c.args, " ")
		t.Run(what, func(t *testing.T) {
			code, out, _ := cli(t, nil, c.args...)
			if code != exitOK {
				t.Errorf("%s exits %d, want 0", what, code)
			}
			wantIn(t, what, out, append(c.wants, "DATABASE_URL", "DATABASE_SECRET_ARN")...)
		})
	}
}

// A usage error is one line that says what is wrong and where the help
// is; the help itself is not printed.
func TestUsageErrorsAreOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"sideways"},
		{"migrate", "sideways"},
		{"status", "--nope"},
		{"status", "extra"},
		{"status", "--timeout", "720h"},
		{"dead", "retry"},
		{"migrate", "print", "extra"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errs := cli(t, map[string]string{}, args...)
			wantCode(t, strings.Join(args, " "), code, exitUsage, out, errs)
			if n := strings.Count(errs, "\n"); n != 1 {
				t.Errorf("stderr has %d lines, want 1:\n%s", n, errs)
			}
			if !strings.Contains(errs, "--help") {
				t.Errorf("stderr %q does not point at --help", errs)
			}
			if strings.Contains(out+errs, "Usage:") {
				t.Errorf("the help was printed:\n%s%s", out, errs)
			}
		})
	}
}

// --timeout becomes the server's statement_timeout, which takes at most
// 24 days; the CLI bounds it and names the flag.
func TestTimeoutIsBounded(t *testing.T) {
	for _, args := range [][]string{
		{"status", "--timeout", "720h"},
		{"status", "--timeout", "0s"},
		{"skip-stall", "--timeout", "2h", "--to", "1", "--reason", "x"},
		{"dead", "list", "--timeout", "500ms"},
		{"migrate", "up", "--timeout", "61m"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errs := cli(t, map[string]string{}, args...)
			wantCode(t, strings.Join(args, " "), code, exitUsage, out, errs)
			wantIn(t, "stderr", errs, "-timeout", "between 1s and 1h")
		})
	}
}

// migrate up and migrate print speak JSON, as every command does.
func TestMigrateUpAndPrintSpeakJSON(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	vars := map[string]string{"DATABASE_URL": db.URL, "OUTBOX_SCHEMA": "json_outbox"}
	all, err := migrate.Load("json_outbox")
	if err != nil {
		t.Fatal(err)
	}
	latest := all[len(all)-1]

	code, out, errs := cli(t, vars, "migrate", "up", "--json")
	wantCode(t, "migrate up --json", code, exitOK, out, errs)
	var up struct {
		Schema  string `json:"schema"`
		Applied []struct {
			Name, Checksum string
		} `json:"applied"`
		AlreadyApplied int    `json:"already_applied"`
		Attempts       int    `json:"attempts"`
		Version        int    `json:"version"`
		Latest         string `json:"latest"`
	}
	if err := json.Unmarshal([]byte(out), &up); err != nil {
		t.Fatalf("migrate up --json is not JSON: %v\n%s", err, out)
	}
	if up.Schema != "json_outbox" || len(up.Applied) != len(all) || up.Applied[0].Checksum != all[0].Checksum ||
		up.Latest != latest.Name || up.Version != latest.Version() || up.Attempts != 1 {
		t.Errorf("migrate up --json = %+v", up)
	}
	code, out, _ = cli(t, vars, "migrate", "up", "--json")
	if err := json.Unmarshal([]byte(out), &up); err != nil || code != exitOK || len(up.Applied) != 0 || up.AlreadyApplied != len(all) {
		t.Errorf("migrate up --json again exits %d with %+v (%v), want nothing applied", code, up, err)
	}

	after := all[len(all)-2].Name
	code, out, errs = cli(t, map[string]string{}, "migrate", "print", "--json", "--after", after)
	wantCode(t, "migrate print --json", code, exitOK, out, errs)
	var printed struct {
		Schema, After, Latest, SQL string
		Migrations                 []struct {
			Name, Checksum string
		}
	}
	if err := json.Unmarshal([]byte(out), &printed); err != nil {
		t.Fatalf("migrate print --json is not JSON: %v\n%s", err, out)
	}
	if printed.Schema != "outbox" || printed.After != after || printed.Latest != latest.Name ||
		len(printed.Migrations) != 1 || printed.Migrations[0].Name != latest.Name || !strings.Contains(printed.SQL, "COMMIT;") {
		t.Errorf("migrate print --json = %+v", printed)
	}
}
