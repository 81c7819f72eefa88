package compensate_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"

	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/esm"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/syncbuf"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/compensate"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
	"github.com/outboxkeeper/outboxkeeper/shared/sqsreport"
)

// Helpers: a fresh real database, real SQS queues on the emulator, and the
// writers whose rollbacks the reports describe.

const region = "us-east-1"

// fixture is one test's world: a fresh database, a source queue with a
// redrive policy to a redrive DLQ, the handler's own DLQ, and the service.
type fixture struct {
	t        *testing.T
	db       *testdb.DB
	sqs      *sqs.Client
	src      string // source queue URL
	srcARN   string
	dlq      string // COMPENSATE_DLQ_URL
	redrive  string // the source queue's redrive target
	cfg      compensate.Config
	svc      *compensate.Service
	logs     *syncbuf.Buffer
	metrics  *syncbuf.Buffer
	reporter *sqsreport.Reporter
}

// setup builds a fixture. env overrides COMPENSATE_* variables; a
// COMPENSATE_DLQ_URL of "none" leaves the DLQ unset, and an absent one is
// filled with a fresh queue.
func setup(t *testing.T, env map[string]string) *fixture {
	t.Helper()
	f := &fixture{t: t, db: testdb.New(t), sqs: sqstest.Client(t), logs: &syncbuf.Buffer{}, metrics: &syncbuf.Buffer{}}
	q := sqstest.NewRedrivenQueue(t, f.sqs, "cmp", 5, map[string]string{"VisibilityTimeout": "30"})
	f.src, f.srcARN, f.redrive = q.URL, q.ARN, q.Redrive
	vars := map[string]string{"COMPENSATE_RETRY_INTERVAL": "50ms", "COMPENSATE_RETRY_ATTEMPTS": "3"}
	for k, v := range env {
		vars[k] = v
	}
	switch vars["COMPENSATE_DLQ_URL"] {
	case "":
		f.dlq = sqstest.NewQueue(t, f.sqs, "cmp-dlq", nil)
		vars["COMPENSATE_DLQ_URL"] = f.dlq
	case "none":
		delete(vars, "COMPENSATE_DLQ_URL")
	default:
		f.dlq = vars["COMPENSATE_DLQ_URL"]
	}
	cfg, err := config.Load[compensate.Config](config.FromMap(vars))
	if err != nil {
		t.Fatal(err)
	}
	f.cfg = cfg
	f.svc = f.service(f.db.Pool)
	if f.reporter, err = sqsreport.New(f.sqs, f.src, sqsreport.Options{MaxSequences: cfg.MaxSequences}); err != nil {
		t.Fatal(err)
	}
	return f
}

// service builds a handler over db with the fixture's configuration.
func (f *fixture) service(db pass.DB) *compensate.Service {
	f.t.Helper()
	svc, err := compensate.New(db, f.cfg, compensate.Options{Options: pass.Options{Logger: slog.New(slog.NewJSONHandler(f.logs, nil)), Metrics: &metrics.Emitter{Function: "compensate", Out: f.metrics}}, SQS: f.sqs})
	if err != nil {
		f.t.Fatal(err)
	}
	return svc
}

// process runs one batch through svc, as Handle would.
func process(svc *compensate.Service, ctx context.Context, ev events.SQSEvent) *compensate.Result {
	res, _ := svc.RunOnce(ctx, ev)
	return res
}

// outbox returns an application Outbox that reports rollbacks to the
// source queue, as a real writer would.
func (f *fixture) outbox() *outbox.Outbox {
	f.t.Helper()
	o, err := outbox.New(f.db.Pool, outbox.Options{Reporter: f.reporter})
	if err != nil {
		f.t.Fatal(err)
	}
	return o
}

var errRollback = errors.New("application error: roll back")

// commit publishes n events in a committed transaction.
func (f *fixture) commit(n int) (seqs []int64) {
	f.t.Helper()
	err := f.outbox().InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
		var err error
		seqs, err = tx.Publish(ctx, "orders", payloads(n)...)
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return seqs
}

// rollback publishes n events in a transaction that rolls back; InTx
// reports them to the source queue.
func (f *fixture) rollback(n int) (seqs []int64) {
	f.t.Helper()
	err := f.outbox().InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
		var err error
		if seqs, err = tx.Publish(ctx, "orders", payloads(n)...); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		f.t.Fatalf("InTx = %v, want the rollback error", err)
	}
	if strings.Contains(err.Error(), "report") {
		f.t.Fatalf("InTx = %v, want the rollback error alone: the report failed", err)
	}
	return seqs
}

func payloads(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]int{"n": i}
	}
	return out
}

// abandoned allocates n sequences in a rolled-back transaction without
// reporting them and returns its xid.
func (f *fixture) abandoned(n int) (uint64, []int64) {
	f.t.Helper()
	ctx := context.Background()
	tx, err := f.db.Pool.Begin(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	seqs, err := f.outbox().Publish(ctx, tx, "orders", payloads(n)...)
	if err != nil {
		f.t.Fatal(err)
	}
	return xidOf(f.t, tx), seqs
}

// openWriter publishes n events in a transaction on its own connection and
// leaves it open (rolled back at cleanup unless the test ends it first): a
// writer that is still in progress.
func (f *fixture) openWriter(n int) (pgx.Tx, []int64) {
	f.t.Helper()
	ctx := context.Background()
	tx, err := f.db.Connect(f.t).Begin(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	seqs, err := f.outbox().Publish(ctx, tx, "orders", payloads(n)...)
	if err != nil {
		f.t.Fatal(err)
	}
	return tx, seqs
}

// xidOf is the xid8 of q's transaction (pgx scans xid8 into uint64).
func xidOf(t *testing.T, q store.Querier) uint64 {
	t.Helper()
	var x uint64
	if err := q.QueryRow(context.Background(), `SELECT pg_current_xact_id()`).Scan(&x); err != nil {
		t.Fatal(err)
	}
	return x
}

// send puts raw bodies on the source queue.
func (f *fixture) send(bodies ...string) {
	f.t.Helper()
	for _, b := range bodies {
		if _, err := f.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(f.src), MessageBody: aws.String(b)}); err != nil {
			f.t.Fatal(err)
		}
	}
}

func body(t *testing.T, r report.Report) string {
	t.Helper()
	b, err := report.Encode(r, 0)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	if len(b) != 1 {
		t.Fatalf("encode gave %d bodies, want 1", len(b))
	}
	return string(b[0])
}

// receive plays the event source mapping: it receives want messages from
// the source queue and converts them to the event Lambda would deliver.
func (f *fixture) receive(want int, timeout time.Duration) events.SQSEvent {
	f.t.Helper()
	msgs := receiveMessages(f.t, f.sqs, f.src, want, timeout)
	if len(msgs) != want {
		f.t.Fatalf("received %d messages, want %d", len(msgs), want)
	}
	return esm.Event(f.srcARN, region, msgs)
}

func receiveMessages(t *testing.T, c *sqs.Client, url string, want int, timeout time.Duration) []sqstypes.Message {
	t.Helper()
	var got []sqstypes.Message
	deadline := time.Now().Add(timeout)
	for len(got) < want && time.Now().Before(deadline) {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(url),
			MaxNumberOfMessages:         int32(min(10, want-len(got))),
			WaitTimeSeconds:             1,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		got = append(got, out.Messages...)
	}
	return got
}

// settle does what the event source mapping does with the response: it
// deletes every message not reported failed.
func (f *fixture) settle(ev events.SQSEvent, resp events.SQSEventResponse) {
	f.t.Helper()
	failed := map[string]bool{}
	for _, it := range resp.BatchItemFailures {
		failed[it.ItemIdentifier] = true
	}
	for _, m := range ev.Records {
		if !failed[m.MessageId] {
			if _, err := f.sqs.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(f.src), ReceiptHandle: aws.String(m.ReceiptHandle)}); err != nil {
				f.t.Fatal(err)
			}
		}
	}
}

// row is one events row as the tests look at it.
type row struct {
	Sequence int64
	FilledBy string
	XMin     string
	Real     bool
}

// rows are the events rows of seqs that exist, by sequence.
func (f *fixture) rows(seqs []int64) map[int64]row {
	f.t.Helper()
	rs, err := f.db.Pool.Query(context.Background(),
		`SELECT sequence, coalesce(filled_by, ''), xmin::text, topic IS NOT NULL FROM `+f.db.Schema.Table("events")+` WHERE sequence = ANY($1)`, seqs)
	if err != nil {
		f.t.Fatal(err)
	}
	list, err := pgx.CollectRows(rs, pgx.RowToStructByPos[row])
	if err != nil {
		f.t.Fatal(err)
	}
	out := make(map[int64]row, len(list))
	for _, r := range list {
		out[r.Sequence] = r
	}
	return out
}

// requirePlaceholders fails unless every sequence is a compensate placeholder.
func (f *fixture) requirePlaceholders(seqs []int64) {
	f.t.Helper()
	rows := f.rows(seqs)
	for _, s := range seqs {
		if r, ok := rows[s]; !ok || r.FilledBy != store.FilledByCompensate {
			f.t.Fatalf("sequence %d: %+v (present %v), want a compensate placeholder", s, r, ok)
		}
	}
}

func (f *fixture) requireMissing(seqs []int64) {
	f.t.Helper()
	if rows := f.rows(seqs); len(rows) != 0 {
		f.t.Fatalf("sequences %v: %v present, want all missing", seqs, rows)
	}
}

func outcomes(res *compensate.Result) map[string]string {
	out := map[string]string{}
	for _, m := range res.Messages {
		out[m.MessageID] = m.Outcome.String()
	}
	return out
}

func failedIDs(resp events.SQSEventResponse) []string {
	var ids []string
	for _, it := range resp.BatchItemFailures {
		ids = append(ids, it.ItemIdentifier)
	}
	slices.Sort(ids)
	return ids
}

// wantFailedItems checks the batch's partial response: exactly the
// messages ids are reported failed (none, when ids is empty).
func wantFailedItems(t *testing.T, what string, res *compensate.Result, ids ...string) {
	t.Helper()
	slices.Sort(ids)
	if got := failedIDs(res.Response()); !slices.Equal(got, ids) {
		t.Errorf("%s: failed items %v, want %v; %v", what, got, ids, res)
	}
}

// sequences are the sequences of evs, in order.
func sequences(evs []outbox.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Sequence
	}
	return out
}
