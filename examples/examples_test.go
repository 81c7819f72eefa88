// Package examples_test runs the Python and Node.js examples with their
// real drivers (psycopg 3 and boto3; pg and @aws-sdk/client-sqs) against
// the local stack: PostgreSQL, the SQS emulator, and the compensate
// function's real bootstrap under aws-lambda-rie. `make examples` installs
// what they need (a virtualenv under .local, npm ci).
package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/esm"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// language is how to run one example.
type language struct {
	name string
	// command returns the interpreter and the example's path, or a reason
	// it cannot run here.
	command func(root string) ([]string, string)
}

var languages = []language{
	{"python", func(root string) ([]string, string) {
		py := filepath.Join(root, ".local", "venv-examples", "bin", "python")
		if _, err := os.Stat(py); err != nil {
			return nil, "the examples' virtualenv is missing: run make examples"
		}
		return []string{py, filepath.Join(root, "examples", "python", "outbox_example.py")}, ""
	}},
	{"node", func(root string) ([]string, string) {
		node, err := exec.LookPath("node")
		if err != nil {
			return nil, "node is not installed"
		}
		if _, err := os.Stat(filepath.Join(root, "examples", "node", "node_modules", "pg")); err != nil {
			return nil, "examples/node/node_modules is missing: run make examples"
		}
		return []string{node, filepath.Join(root, "examples", "node", "outbox-example.js")}, ""
	}},
}

// published is what the example's publish step prints.
type published struct {
	Committed  []int64 `json:"committed"`
	RolledBack []int64 `json:"rolled_back"`
	XID        string  `json:"xid"`
}

// consumed is one line the example's consume step prints.
type consumed struct {
	Sequence int64           `json:"sequence"`
	Topic    *string         `json:"topic"`
	Payload  json.RawMessage `json:"payload"`
	Headers  json.RawMessage `json:"headers"`
	FilledBy *string         `json:"filled_by"`
}

// Each example publishes with plain INSERTs, as the writer role, in
// transactions (three orders, a declined one of two that rolls back and is
// reported with its xid, one more), the
// compensate function fills the reported rollback from the queue, and the
// example's consumer reads everything in order with read_events,
// placeholders marked, committing its position with commit_position.
func TestExamplePublishesReportsAndConsumes(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range languages {
		t.Run(lang.name, func(t *testing.T) {
			t.Parallel()
			argv, why := lang.command(root)
			if argv == nil {
				testenv.Skip(t, why)
			}
			db := testdb.New(t)
			// The application's role, as grant_writer sets it up: the
			// example's INSERT names the payload columns only.
			writer := db.Writer(t)
			client := sqstest.Client(t)
			queue := sqstest.NewQueue(t, client, "reports-"+lang.name, nil)
			env := append(os.Environ(),
				"DATABASE_URL="+writer.URL,
				"OUTBOX_SCHEMA="+db.Schema.Name(),
				"ROLLBACK_QUEUE_URL="+queue,
			)
			for _, k := range []string{"AWS_ENDPOINT_URL_SQS", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
				env = append(env, k+"="+testenv.Require(t, k))
			}
			run := func(args ...string) []byte {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], args...)...)
				cmd.Env = env
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("%s %v: %v\nstdout:\n%s\nstderr:\n%s", lang.name, args, err, out, stderr.String())
				}
				return out
			}

			var pub published
			if err := json.Unmarshal(run("publish", "--committed", "3", "--rolled-back", "2"), &pub); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(pub.Committed, []int64{1, 2, 3, 6}) {
				t.Errorf("committed = %v, want [1 2 3 6]", pub.Committed)
			}
			if !slices.Equal(pub.RolledBack, []int64{4, 5}) {
				t.Fatalf("rolled back = %v, want [4 5]", pub.RolledBack)
			}

			// The report on the queue carries the xid taken inside the
			// transaction and its sequences.
			msgs := sqstest.Drain(t, client, queue, 1, 10*time.Second)
			if len(msgs) != 1 {
				t.Fatalf("%d reports on the queue, want 1", len(msgs))
			}
			rep, err := report.Parse([]byte(*msgs[0].Body), report.DefaultMaxSequences)
			if err != nil {
				t.Fatalf("report %q: %v", *msgs[0].Body, err)
			}
			if !rep.HasXID || strconv.FormatUint(rep.XID, 10) != pub.XID {
				t.Errorf("report xid = %d (has %v), want the transaction's %s", rep.XID, rep.HasXID, pub.XID)
			}
			if !slices.Equal(rep.Sequences, pub.RolledBack) {
				t.Errorf("report sequences = %v, want %v", rep.Sequences, pub.RolledBack)
			}

			// The compensate function, as the event source mapping calls it.
			fn := lambdatest.Start(t, lambdatest.Build(t, "compensate"), map[string]string{"DATABASE_URL": db.URL})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var resp events.SQSEventResponse
			if err := fn.InvokeJSON(ctx, esm.Event(sqstest.QueueARN(t, client, queue), "us-east-1", msgs), &resp); err != nil {
				t.Fatalf("compensate: %v\n%s", err, fn.Logs())
			}
			if len(resp.BatchItemFailures) != 0 {
				t.Fatalf("compensate failed items %+v\n%s", resp.BatchItemFailures, fn.Logs())
			}

			var got []consumed
			for _, line := range bytes.Split(bytes.TrimSpace(run("consume", "--name", "ledger", "--until", "6", "--batch", "2")), []byte("\n")) {
				var c consumed
				if err := json.Unmarshal(line, &c); err != nil {
					t.Fatalf("consumed line %q: %v", line, err)
				}
				got = append(got, c)
			}
			var order []int64
			for _, c := range got {
				order = append(order, c.Sequence)
			}
			if !slices.Equal(order, []int64{1, 2, 3, 4, 5, 6}) {
				t.Fatalf("consumed %v, want 1..6 in order", order)
			}
			for _, c := range got {
				placeholder := slices.Contains(pub.RolledBack, c.Sequence)
				switch {
				case placeholder && (c.FilledBy == nil || *c.FilledBy != "compensate"):
					t.Errorf("sequence %d filled_by %v, want compensate", c.Sequence, c.FilledBy)
				case placeholder && c.Topic != nil:
					t.Errorf("placeholder %d has topic %q", c.Sequence, *c.Topic)
				case !placeholder && (c.Topic == nil || *c.Topic != "order.placed"):
					t.Errorf("event %d topic %v, want order.placed", c.Sequence, c.Topic)
				case !placeholder && c.FilledBy != nil:
					t.Errorf("event %d marked filled_by %q", c.Sequence, *c.FilledBy)
				}
			}
			if h := string(got[0].Headers); h != `{"source": "`+lang.name+`"}` && h != `{"source":"`+lang.name+`"}` {
				t.Errorf("headers of event 1 = %s, want source %s", h, lang.name)
			}
			var position int64
			if err := db.Pool.QueryRow(ctx, `SELECT position FROM outbox.consumers WHERE name = 'ledger'`).Scan(&position); err != nil || position != 6 {
				t.Errorf("ledger's position = %d, %v; want 6", position, err)
			}

			// enqueue(): an event and a delivery in one transaction, as
			// the writer role.
			var enq struct {
				Sequence int64 `json:"sequence"`
				Delivery int64 `json:"delivery"`
			}
			if out := run("enqueue", "--recipient", "crm", "--kind", "invoice.paid", "--tenant", "t-"+lang.name); json.Unmarshal(out, &enq) != nil {
				t.Fatalf("enqueue printed %s", out)
			}
			var recipient, kind, tenant, state string
			var payload []byte
			if err := db.Pool.QueryRow(ctx, `SELECT recipient, kind, tenant_id, state, payload FROM outbox.deliveries WHERE id = $1`, enq.Delivery).
				Scan(&recipient, &kind, &tenant, &state, &payload); err != nil {
				t.Fatalf("the enqueued delivery %d: %v", enq.Delivery, err)
			}
			if recipient != "crm" || kind != "invoice.paid" || tenant != "t-"+lang.name || state != "pending" {
				t.Errorf("the delivery is %s/%s/%s/%s, want crm/invoice.paid/t-%s/pending", recipient, kind, tenant, state, lang.name)
			}
			var doc struct{ ID, Sequence int64 }
			if err := json.Unmarshal(payload, &doc); err != nil || doc.Sequence != enq.Sequence {
				t.Errorf("the delivery's payload %s, want the event's sequence %d", payload, enq.Sequence)
			}
		})
	}
}
