package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/passtest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// The operator's commands against the real local stack: PostgreSQL (a
// fresh database per test, the functions' passes run for real) and the
// fauxqs SQS emulator. Here: the helpers, help pages and usage errors,
// dead and dlq; status and skip-stall in status_test.go and
// skipstall_test.go.

// fillPass runs one bounded fill pass, as a scheduled invocation would
// (no grace: the tests make their stalls on purpose).
func fillPass(t *testing.T, db *testdb.DB) *fill.Result {
	t.Helper()
	return passtest.Run(t, context.Background(), passtest.Fill(t, db.Pool, 700*time.Millisecond))
}

// sweepPass runs one sweep pass, so sweep_state says it runs.
func sweepPass(t *testing.T, db *testdb.DB) {
	t.Helper()
	passtest.Run(t, context.Background(), passtest.Sweep(t, db.Pool, sweep.Config{}))
}

// prunePass runs one prune pass with an event retention (0: none), so
// prune_state records it.
func prunePass(t *testing.T, db *testdb.DB, eventsAfter time.Duration) *prune.Result {
	t.Helper()
	return passtest.Run(t, context.Background(), passtest.Prune(t, db.Pool, prune.Config{EventsAfter: eventsAfter}))
}

// healthyDB is a database whose one event is published and filled, and
// whose sweep has run: an outbox with nothing to report.
func healthyDB(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	publish(t, db)
	fillPass(t, db)
	sweepPass(t, db)
	return db
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

// dead list shows dead rows only, newest first, never a payload; dead
// retry is one compare-and-set: a row revived meanwhile is left alone and
// named, a retried row is pending with its redeliveries back at 0.
func TestDeadListAndRetry(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	op := db.Operator(t)
	vars := map[string]string{"DATABASE_URL": op.URL}
	insertDead := func(recipient string, deadFor time.Duration) int64 {
		t.Helper()
		id := testdb.Scalar[int64](t, db.Pool, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, redeliveries, delivered_at, dead_at)
			VALUES ($1, 'invoice', 'secret-payload', 'dead', 11, 10, now() - $2::interval - interval '1 minute', now() - $2::interval) RETURNING id`,
			recipient, fmt.Sprintf("%d seconds", int(deadFor.Seconds())))
		return id
	}
	old := insertDead("ledger", 2*time.Hour)
	revived := insertDead("billing", 10*time.Minute)
	fresh := insertDead("billing", 0)
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload) VALUES ('billing', 'invoice', '')`)

	code, out, errs := cli(t, vars, "dead", "list")
	wantCode(t, "dead list", code, exitOK, out, errs)
	wantIn(t, "dead list", out, "ledger", "billing", "REDELIVERIES")
	if strings.Contains(out, "secret-payload") {
		t.Errorf("dead list prints a payload:\n%s", out)
	}
	code, out, _ = cli(t, vars, "dead", "list", "--json")
	var listed []struct{ ID int64 }
	if err := json.Unmarshal([]byte(out), &listed); err != nil || code != exitOK {
		t.Fatalf("dead list --json exits %d: %v\n%s", code, err, out)
	}
	if len(listed) != 3 || listed[0].ID != fresh || listed[2].ID != old {
		t.Errorf("dead list --json = %v, want %d, %d, %d (newest first)", listed, fresh, revived, old)
	}
	code, out, _ = cli(t, vars, "dead", "list", "--older-than", "1h", "--json")
	if err := json.Unmarshal([]byte(out), &listed); err != nil || len(listed) != 1 || listed[0].ID != old {
		t.Errorf("dead list --older-than 1h exits %d with %s, want only %d", code, out, old)
	}

	// Between the list and the retry, someone put `revived` back and the
	// relay pushed it again.
	db.Exec(t, `UPDATE outbox.deliveries SET state = 'pending', redeliveries = 0, dead_at = NULL, delivered_at = NULL WHERE id = $1`, revived)
	ob, err := outbox.New(db.Pool, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.MarkDelivered(ctx, nil, revived); err != nil {
		t.Fatal(err)
	}

	code, out, errs = cli(t, vars, "dead", "retry", "--id", fmt.Sprintf("%d,%d", revived, fresh), "--id", "999999")
	wantCode(t, "dead retry with a revived row", code, exitAttention, out, errs)
	wantIn(t, "dead retry", out, "reset 1 of 3", fmt.Sprintf("%d: not dead (it is delivered): left alone", revived), "999999: no such delivery")
	type state struct {
		State        string
		Redeliveries int
		Attempts     int
		DeadAt       *time.Time
		DeliveredAt  *time.Time
	}
	read := func(id int64) state {
		t.Helper()
		var s state
		if err := db.Pool.QueryRow(ctx, `SELECT state, redeliveries, attempts, dead_at, delivered_at FROM outbox.deliveries WHERE id = $1`, id).
			Scan(&s.State, &s.Redeliveries, &s.Attempts, &s.DeadAt, &s.DeliveredAt); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := read(fresh); s.State != "pending" || s.Redeliveries != 0 || s.DeadAt != nil || s.DeliveredAt != nil || s.Attempts != 11 {
		t.Errorf("the retried row is %+v, want pending, 0 redeliveries, no dead_at or delivered_at, attempts kept", s)
	}
	if s := read(revived); s.State != "delivered" || s.Attempts != 12 {
		t.Errorf("the revived row is %+v, want it left delivered by the relay", s)
	}
	if s := read(old); s.State != "dead" {
		t.Errorf("the row not asked for is %s, want dead", s.State)
	}

	code, out, errs = cli(t, vars, "dead", "retry", "--all", "--older-than", "1h")
	wantCode(t, "dead retry --all --older-than 1h", code, exitOK, out, errs)
	wantIn(t, "dead retry --all", out, "reset 1 dead delivery to pending")
	if s := read(old); s.State != "pending" || s.Redeliveries != 0 {
		t.Errorf("the old dead row is %+v after --all, want pending with 0 redeliveries", s)
	}

	for _, bad := range [][]string{
		{"dead", "retry"},
		{"dead", "retry", "--all", "--id", "1"},
		{"dead", "retry", "--id", "1", "--older-than", "1h"},
		{"dead", "retry", "--id", "x"},
		{"dead", "retry", "--id", "0"},
		{"dead", "retry", "--all", "--limit", "0"},
		{"dead", "list", "--limit", "0"},
		{"dead", "list", "extra"},
	} {
		t.Run(strings.Join(bad, " "), func(t *testing.T) {
			code, out, errs := cli(t, vars, bad...)
			wantCode(t, strings.Join(bad, " "), code, exitUsage, out, errs)
		})
	}
}

// dlq list shows each message with compensate's error attribute and the
// parser's verdict, and leaves every one in place; redrive sends the valid
// report back to the report queue and leaves bad input in the DLQ, its
// attribute intact.
func TestDLQListAndRedrive(t *testing.T) {
	t.Parallel()
	c := sqstest.Client(t)
	ctx := context.Background()
	queue := sqstest.NewQueue(t, c, "ok-reports", nil)
	dlq := sqstest.NewQueue(t, c, "ok-reports-dlq", nil)
	send := func(body, errAttr string) {
		t.Helper()
		in := &sqs.SendMessageInput{QueueUrl: aws.String(dlq), MessageBody: aws.String(body)}
		if errAttr != "" {
			in.MessageAttributes = map[string]sqstypes.MessageAttributeValue{"error": {DataType: aws.String("String"), StringValue: aws.String(errAttr)}}
		}
		if _, err := c.SendMessage(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	const valid = `{"v":1,"xid":"7305","sequences":[1201,1202]}`
	send(valid, "")
	send(`{"v":1,"sequences":[]}`, "")
	send(`{"v":1,"sequences":[99999]}`, "sequence 99999 is above the allocation head 12")
	vars := map[string]string{"ROLLBACK_QUEUE_URL": queue, "ROLLBACK_DLQ_URL": dlq}

	code, out, errs := cli(t, vars, "dlq", "list")
	wantCode(t, "dlq list", code, exitOK, out, errs)
	wantIn(t, "dlq list", out, "redrive", "invalid", "empty sequences", "rejected", "above the allocation head 12",
		"SQS has no peek", "receive count went up by one")
	code, out, _ = cli(t, vars, "dlq", "list", "--json")
	var listed []dlqMessage
	if err := json.Unmarshal([]byte(out), &listed); err != nil || code != exitOK {
		t.Fatalf("dlq list --json exits %d: %v\n%s", code, err, out)
	}
	if len(listed) != 3 {
		t.Fatalf("dlq list --json lists %d messages, want 3 (list must leave them visible): %s", len(listed), out)
	}

	code, out, errs = cli(t, vars, "dlq", "redrive", "--dry-run")
	wantCode(t, "dlq redrive --dry-run", code, exitAttention, out, errs)
	wantIn(t, "dlq redrive --dry-run", out, "would send 1 report")
	if got := sqstest.Drain(t, c, queue, 1, 2*time.Second); len(got) != 0 {
		t.Errorf("--dry-run sent %d messages to the report queue, want none", len(got))
	}

	code, out, errs = cli(t, vars, "dlq", "redrive")
	wantCode(t, "dlq redrive with bad input left", code, exitAttention, out, errs)
	wantIn(t, "dlq redrive", out, "sent 1 report back", "left 2 bad messages")
	var bodies []string
	for _, m := range sqstest.Drain(t, c, queue, 1, 5*time.Second) {
		bodies = append(bodies, aws.ToString(m.Body))
	}
	if len(bodies) != 1 || bodies[0] != valid {
		t.Errorf("the report queue holds %q, want the valid report unchanged", bodies)
	}
	left := sqstest.Drain(t, c, dlq, 2, 5*time.Second)
	if len(left) != 2 {
		t.Fatalf("the DLQ holds %d messages after the redrive, want the 2 bad ones", len(left))
	}
	attrs := 0
	for _, m := range left {
		if aws.ToString(m.Body) == valid {
			t.Errorf("the valid report is still in the DLQ")
		}
		if a, ok := m.MessageAttributes["error"]; ok && strings.Contains(aws.ToString(a.StringValue), "above the allocation head") {
			attrs++
		}
	}
	if attrs != 1 {
		t.Errorf("%d messages left kept compensate's error attribute, want 1", attrs)
	}

	if code, out, errs := cli(t, map[string]string{"ROLLBACK_DLQ_URL": dlq}, "dlq", "redrive"); code != exitUsage {
		t.Errorf("redrive without the report queue exits %d, want %d\n%s%s", code, exitUsage, out, errs)
	}
	if code, out, errs := cli(t, map[string]string{}, "dlq", "list"); code != exitUsage || !strings.Contains(errs, dlqURLVar) {
		t.Errorf("dlq list without a DLQ exits %d with %q, want %d naming %s\n%s", code, errs, exitUsage, dlqURLVar, out)
	}
}
