package compensate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/internal/setting"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/esm"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/syncbuf"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/compensate"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
	"github.com/outboxkeeper/outboxkeeper/shared/sqsreport"
)

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
	f.redrive = sqstest.NewQueue(t, f.sqs, "cmp-redrive", nil)
	policy, _ := json.Marshal(map[string]any{"deadLetterTargetArn": sqstest.QueueARN(t, f.sqs, f.redrive), "maxReceiveCount": 5})
	f.src = sqstest.NewQueue(t, f.sqs, "cmp-src", map[string]string{
		"VisibilityTimeout": "30",
		"RedrivePolicy":     string(policy),
	})
	f.srcARN = sqstest.QueueARN(t, f.sqs, f.src)
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

// A report for an aborted writer fills its missing sequences at
// once: one handler call, no grace, no proof.
func TestAbortedWriterFilledAtOnce(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	before := f.commit(1)
	lost := f.rollback(3) // InTx reports these to the source queue
	after := f.commit(1)

	ev := f.receive(1, 10*time.Second)
	started := time.Now()
	res := process(f.svc, context.Background(), ev)
	elapsed := time.Since(started)

	if res.Filled != 3 {
		t.Errorf("Filled = %d, want 3", res.Filled)
	}
	if res.AlreadyPresent != 0 {
		t.Errorf("AlreadyPresent = %d, want 0", res.AlreadyPresent)
	}
	wantFailedItems(t, "the batch", res)
	f.requirePlaceholders(lost)
	// Faster than any grace: the consumer can read past the gap as soon as
	// one batch was handled, well inside the fill function's default grace.
	if elapsed >= fill.DefaultGrace {
		t.Errorf("handling took %s, not faster than the fill grace %s", elapsed, fill.DefaultGrace)
	}
	evs, err := f.outbox().ReadContiguous(context.Background(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(before, lost, after)
	if got := sequences(evs); !slices.Equal(got, want) {
		t.Errorf("the consumer reads %v, want all of %v through the filled gap", got, want)
	}
	if want := []int64{lost[0], lost[2]}; !slices.Equal(res.FilledRange, want) {
		t.Errorf("FilledRange = %v, want %v", res.FilledRange, want)
	}
}

// Handle writes the batch's log line and its metrics from the one Result,
// and answers the partial batch response.
func TestHandleLogsTheBatchAndEmitsItsMetrics(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	lost := f.rollback(3)
	resp, err := f.svc.Handle(context.Background(), f.receive(1, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("failures %v, want none", resp.BatchItemFailures)
	}
	f.requirePlaceholders(lost)
	if logs := f.logs.String(); !strings.Contains(logs, `"msg":"compensate batch"`) {
		t.Errorf("no batch log line:\n%s", logs)
	}
	if logs := f.logs.String(); !strings.Contains(logs, fmt.Sprintf(`"filled_range":[%d,%d]`, lost[0], lost[2])) {
		t.Errorf("the log line lacks filled_range:\n%s", logs)
	}
	if m := f.metrics.String(); !strings.Contains(m, `"Filled":3`) {
		t.Errorf("metrics %s, want Filled 3", m)
	}
}

// The filled range is notified on <schema>_events after the rows commit,
// and an insert that writes nothing notifies nothing.
func TestFilledRangeNotified(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	listener := f.db.Connect(t)
	ctx := context.Background()
	if _, err := listener.Exec(ctx, `LISTEN `+pgx.Identifier{f.db.Schema.EventsChannel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	xid, seqs := f.abandoned(4)
	f.send(body(t, report.Report{XID: xid, HasXID: true, Sequences: seqs}))
	process(f.svc, ctx, f.receive(1, 10*time.Second))
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := listener.WaitForNotification(wctx)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"min":%d,"max":%d}`, seqs[0], seqs[3])
	if n.Payload != want {
		t.Fatalf("notification %q, want %q", n.Payload, want)
	}

	// The same report again: the insert writes nothing, so it notifies
	// nothing, and the next notification is the sentinel sent after it
	// (one channel delivers in commit order).
	f.send(body(t, report.Report{XID: xid, HasXID: true, Sequences: seqs}))
	res := process(f.svc, ctx, f.receive(1, 10*time.Second))
	if res.Filled != 0 {
		t.Errorf("redelivery: Filled = %d, want 0", res.Filled)
	}
	if res.AlreadyPresent != 4 {
		t.Errorf("redelivery: AlreadyPresent = %d, want 4", res.AlreadyPresent)
	}
	if _, err := f.db.Pool.Exec(ctx, `NOTIFY `+pgx.Identifier{f.db.Schema.EventsChannel()}.Sanitize()+`, 'sentinel'`); err != nil {
		t.Fatal(err)
	}
	if n, err = listener.WaitForNotification(wctx); err != nil {
		t.Fatalf("waiting for the sentinel: %v", err)
	}
	if n.Payload != "sentinel" {
		t.Errorf("after an insert that wrote nothing: notification %q, want the sentinel", n.Payload)
	}
}

// A report whose writer is still open is deferred: its visibility
// is set to COMPENSATE_DEFER (seen through SQS: not receivable at once,
// receivable again after the deferral, long before the queue's 30s
// visibility timeout) and it is a failed item. After the writer rolls back,
// the redelivered message fills it.
func TestOpenWriterDeferredThenRolledBackFills(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"COMPENSATE_DEFER": "2s"})
	ctx := context.Background()
	tx, seqs := f.openWriter(2)
	xid := xidOf(t, tx)
	if err := f.reporter.Report(ctx, report.Report{XID: xid, HasXID: true, Sequences: seqs}); err != nil {
		t.Fatal(err)
	}

	ev := f.receive(1, 10*time.Second)
	res := process(f.svc, ctx, ev)
	if res.Deferred != 1 {
		t.Errorf("Deferred = %d, want 1", res.Deferred)
	}
	if res.Filled != 0 {
		t.Errorf("Filled = %d, want 0 while the writer runs", res.Filled)
	}
	wantFailedItems(t, "the deferred batch", res, ev.Records[0].MessageId)
	f.settle(ev, res.Response())
	deferredAt := time.Now()
	if got := receiveNow(t, f); len(got) != 0 {
		t.Fatalf("deferred message receivable at once: %v", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	ev = f.receive(1, 10*time.Second)
	if waited := time.Since(deferredAt); waited < 1500*time.Millisecond || waited > 10*time.Second {
		t.Fatalf("redelivered after %s, want about the 2s deferral (queue visibility is 30s)", waited)
	}
	if ev.Records[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Errorf("receive count %q, want 2", ev.Records[0].Attributes["ApproximateReceiveCount"])
	}
	res = process(f.svc, ctx, ev)
	if res.Filled != 2 {
		t.Errorf("after rollback: Filled = %d, want 2", res.Filled)
	}
	wantFailedItems(t, "after rollback", res)
	f.requirePlaceholders(seqs)
}

// receiveNow is one ReceiveMessage that does not wait.
func receiveNow(t *testing.T, f *fixture) []sqstypes.Message {
	t.Helper()
	out, err := f.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.src), MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	return out.Messages
}

// If the open writer commits instead, its real rows are kept.
func TestOpenWriterDeferredThenCommittedKeepsRows(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"COMPENSATE_DEFER": "1s"})
	ctx := context.Background()
	tx, seqs := f.openWriter(2)
	f.send(body(t, report.Report{XID: xidOf(t, tx), HasXID: true, Sequences: seqs}))
	ev := f.receive(1, 10*time.Second)
	if res := process(f.svc, ctx, ev); res.Deferred != 1 {
		t.Fatalf("Deferred = %d, want 1; %v", res.Deferred, res)
	}
	f.settle(ev, events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: ev.Records[0].MessageId}}})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res := process(f.svc, ctx, f.receive(1, 10*time.Second))
	if res.Filled != 0 {
		t.Errorf("after commit: Filled = %d, want 0", res.Filled)
	}
	if res.AlreadyPresent != 2 {
		t.Errorf("after commit: AlreadyPresent = %d, want 2", res.AlreadyPresent)
	}
	wantFailedItems(t, "after commit", res)
	for s, r := range f.rows(seqs) {
		if !r.Real {
			t.Errorf("sequence %d overwritten: %+v", s, r)
		}
	}
}

// A writer that outlives COMPENSATE_MAX_DEFERRALS receives is not bad
// input: the message is dropped (handled, not failed, not in any DLQ) and
// nothing is filled; the fill function proves and fills it later.
func TestLongWriterDroppedAfterMaxDeferrals(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"COMPENSATE_DEFER": "0s", "COMPENSATE_MAX_DEFERRALS": "2"})
	ctx := context.Background()
	tx, seqs := f.openWriter(1)
	f.send(body(t, report.Report{XID: xidOf(t, tx), HasXID: true, Sequences: seqs}))

	ev := f.receive(1, 10*time.Second)
	res := process(f.svc, ctx, ev)
	if res.Deferred != 1 {
		t.Errorf("first receive: Deferred = %d, want 1", res.Deferred)
	}
	if res.Dropped != 0 {
		t.Errorf("first receive: Dropped = %d, want 0", res.Dropped)
	}
	ev = f.receive(1, 10*time.Second) // visible again at once (defer 0s)
	res = process(f.svc, ctx, ev)
	if res.Dropped != 1 {
		t.Errorf("second receive: Dropped = %d, want 1", res.Dropped)
	}
	if res.Deferred != 0 {
		t.Errorf("second receive: Deferred = %d, want 0", res.Deferred)
	}
	if res.Failed != 0 {
		t.Errorf("second receive: Failed = %d, want 0 (a drop is handled)", res.Failed)
	}
	wantFailedItems(t, "second receive", res)
	f.settle(ev, res.Response())
	if !strings.Contains(f.logs.String(), "the fill function will prove and fill") {
		t.Errorf("no log line about the drop: %s", f.logs)
	}
	if got := sqstest.Drain(t, f.sqs, f.dlq, 1, 1500*time.Millisecond); len(got) != 0 {
		t.Errorf("dropped report reached the DLQ: %v", got)
	}
	f.requireMissing(seqs)
}

// A report naming sequences that were committed changes nothing:
// the rows keep their xmin (never rewritten, not even by an update).
func TestCommittedSequencesUnchanged(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ctx := context.Background()
	var xid uint64
	var seqs []int64
	err := f.outbox().InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
		var err error
		seqs, err = tx.Publish(ctx, "orders", payloads(3)...)
		xid = xidOf(t, tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	before := f.rows(seqs)
	f.send(body(t, report.Report{XID: xid, HasXID: true, Sequences: seqs}))
	res := process(f.svc, ctx, f.receive(1, 10*time.Second))
	if res.Filled != 0 {
		t.Errorf("Filled = %d, want 0", res.Filled)
	}
	if res.AlreadyPresent != 3 {
		t.Errorf("AlreadyPresent = %d, want 3", res.AlreadyPresent)
	}
	wantFailedItems(t, "the batch", res)
	after := f.rows(seqs)
	for _, s := range seqs {
		if before[s] != after[s] {
			t.Errorf("sequence %d changed: %+v -> %+v", s, before[s], after[s])
		}
		if !after[s].Real {
			t.Errorf("sequence %d: %+v, want the committed event", s, after[s])
		}
	}
}

// A report naming a sequence at or below the fill watermark that prune has
// deleted (a report redriven from the DLQ long after, or a forged one)
// re-creates nothing: pruned history stays pruned, and its oldest prefix
// gets no young row that would hold event retention back.
func TestPrunedSequenceNotRecreated(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ctx := context.Background()
	seqs := f.commit(3)
	if _, err := f.db.Pool.Exec(ctx, `UPDATE outbox.fill_state SET watermark = $1`, seqs[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Pool.Exec(ctx, `DELETE FROM outbox.events WHERE sequence = $1`, seqs[0]); err != nil {
		t.Fatal(err)
	}
	f.send(body(t, report.Report{Sequences: seqs[:1]}))
	res := process(f.svc, ctx, f.receive(1, 10*time.Second))
	if res.Filled != 0 {
		t.Errorf("Filled = %d, want 0", res.Filled)
	}
	if res.AlreadyPresent != 1 {
		t.Errorf("AlreadyPresent = %d, want 1 (pruned counts as present)", res.AlreadyPresent)
	}
	wantFailedItems(t, "the batch", res)
	f.requireMissing(seqs[:1])
}

// Every kind of bad input ends in the DLQ, body unchanged, with a
// distinct reason in the `error` attribute; the rest of the batch succeeds.
func TestBadInputToDLQ(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"COMPENSATE_MAX_SEQUENCES": "5"})
	ctx := context.Background()
	xid, good := f.abandoned(2)
	head, err := f.outbox().Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		"above head":  body(t, report.Report{XID: xid, HasXID: true, Sequences: []int64{head + 10}}),
		"future xid":  body(t, report.Report{XID: xid + 1_000_000, HasXID: true, Sequences: good}),
		"malformed":   `{"v":1,"sequences":[1,`,
		"version 2":   `{"v":2,"sequences":[1]}`,
		"empty":       `{"v":1,"sequences":[]}`,
		"oversized":   `{"v":1,"sequences":[1,2,3,4,5,6]}`,
		"non-decimal": `{"v":1,"xid":"0x1f","sequences":[1]}`,
	}
	wantReason := map[string]string{
		"above head": "above the allocation head", "future xid": "in the future", "malformed": "malformed JSON",
		"version 2": "unsupported version", "empty": "empty sequences", "oversized": "exceed the limit of 5",
		"non-decimal": "not a decimal xid8",
	}
	goodBody := body(t, report.Report{XID: xid, HasXID: true, Sequences: good})
	f.send(goodBody)
	for _, b := range bad {
		f.send(b)
	}
	ev := f.receive(len(bad)+1, 10*time.Second)
	idOf := map[string]string{} // body → its message id on the source queue
	for _, r := range ev.Records {
		idOf[r.Body] = r.MessageId
	}
	res := process(f.svc, ctx, ev)
	if res.Filled != 2 {
		t.Errorf("Filled = %d, want the good report's 2", res.Filled)
	}
	if res.Invalid != len(bad) {
		t.Errorf("Invalid = %d, want %d", res.Invalid, len(bad))
	}
	if res.Failed != 0 {
		t.Errorf("Failed = %d, want 0: bad input sent to the DLQ is handled", res.Failed)
	}
	wantFailedItems(t, "the batch", res)
	f.requirePlaceholders(good)

	got := sqstest.Drain(t, f.sqs, f.dlq, len(bad), 10*time.Second)
	if len(got) != len(bad) {
		t.Fatalf("DLQ holds %d messages, want %d", len(got), len(bad))
	}
	reasons := map[string]bool{}
	for _, m := range got {
		reason := aws.ToString(m.MessageAttributes["error"].StringValue)
		var name string
		for n, b := range bad {
			if b == aws.ToString(m.Body) {
				name = n
			}
		}
		if name == "" {
			t.Fatalf("DLQ body %q is not one of the bad bodies unchanged", aws.ToString(m.Body))
		}
		if !strings.Contains(reason, wantReason[name]) {
			t.Errorf("%s: DLQ reason %q, want it to contain %q", name, reason, wantReason[name])
		}
		if source, want := aws.ToString(m.MessageAttributes["source_message_id"].StringValue), idOf[aws.ToString(m.Body)]; source != want {
			t.Errorf("%s: source_message_id %q, want the report's own message id %q", name, source, want)
		}
		reasons[reason] = true
	}
	if len(reasons) != len(bad) {
		t.Fatalf("reasons not distinct: %v", reasons)
	}
}

// Bad input with no DLQ configured is a failed item (the queue's redrive
// policy moves it) and logged; the good report in the batch still fills.
func TestBadInputWithoutDLQIsFailedItem(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"COMPENSATE_DLQ_URL": "none"})
	xid, good := f.abandoned(1)
	f.send(body(t, report.Report{XID: xid, HasXID: true, Sequences: good}), `{"v":7}`)
	ev := f.receive(2, 10*time.Second)
	res := process(f.svc, context.Background(), ev)
	var badID string
	for _, m := range ev.Records {
		if m.Body == `{"v":7}` {
			badID = m.MessageId
		}
	}
	if res.Filled != 1 {
		t.Errorf("Filled = %d, want the good report's 1", res.Filled)
	}
	if res.Invalid != 1 {
		t.Errorf("Invalid = %d, want 1", res.Invalid)
	}
	if res.Failed != 1 {
		t.Errorf("Failed = %d, want 1", res.Failed)
	}
	wantFailedItems(t, "the batch", res, badID)
	if !strings.Contains(f.logs.String(), "no COMPENSATE_DLQ_URL") {
		t.Errorf("no log line for the undeliverable bad input: %s", f.logs)
	}
}

// A DLQ that cannot be reached: the bad message is a failed item (not lost,
// not deleted) rather than silently handled.
func TestDLQSendFailureIsFailedItem(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.cfg.DLQURL = f.dlq + "-missing"
	svc := f.service(f.db.Pool)
	f.send(`garbage`)
	ev := f.receive(1, 10*time.Second)
	res := process(svc, context.Background(), ev)
	if res.Failed != 1 {
		t.Errorf("Failed = %d, want 1", res.Failed)
	}
	wantFailedItems(t, "the batch", res, ev.Records[0].MessageId)
	if len(res.Messages) != 1 {
		t.Fatalf("%d messages in the result, want 1; %v", len(res.Messages), res)
	}
	if reason := res.Messages[0].Reason; !strings.Contains(reason, "DLQ send failed") {
		t.Errorf("reason %q, want it to name the DLQ failure", reason)
	}
}

// The same message delivered twice fills once; the second time
// writes nothing and fails nothing.
func TestDuplicateDeliveryFillsOnce(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.rollback(3)
	ev := f.receive(1, 10*time.Second)
	first := process(f.svc, context.Background(), ev)
	second := process(f.svc, context.Background(), ev)
	if first.Filled != 3 {
		t.Errorf("first delivery: Filled = %d, want 3", first.Filled)
	}
	wantFailedItems(t, "first delivery", first)
	if second.Filled != 0 {
		t.Errorf("second delivery: Filled = %d, want 0", second.Filled)
	}
	if second.AlreadyPresent != 3 {
		t.Errorf("second delivery: AlreadyPresent = %d, want 3", second.AlreadyPresent)
	}
	wantFailedItems(t, "second delivery", second)
}

// Handlers processing overlapping reports at the same time fill
// each sequence exactly once, with no error (no deadlock, no conflict).
func TestConcurrentOverlappingHandlers(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	xid, seqs := f.abandoned(200)
	// Each handler gets its own pool, so they really run concurrently.
	const handlers = 6
	var svcs []*compensate.Service
	for range handlers {
		svcs = append(svcs, f.service(f.db.NewPool(t, "")))
	}
	// Overlapping windows in shuffled message order: handler i reports
	// seqs[i*20 : i*20+100].
	var wg sync.WaitGroup
	results := make([]*compensate.Result, handlers)
	start := make(chan struct{})
	for i := range handlers {
		var ev events.SQSEvent
		for j := range 3 {
			lo := (i*20 + j*30) % 100
			part := seqs[lo : lo+100]
			ev.Records = append(ev.Records, events.SQSMessage{
				MessageId: fmt.Sprintf("m%d-%d", i, j), Body: body(t, report.Report{XID: xid, HasXID: true, Sequences: part}),
				EventSourceARN: f.srcARN, Attributes: map[string]string{"ApproximateReceiveCount": "1"},
			})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = process(svcs[i], context.Background(), ev)
		}()
	}
	close(start)
	wg.Wait()
	total := 0
	for i, r := range results {
		wantFailedItems(t, fmt.Sprintf("handler %d", i), r)
		if r.Error != "" {
			t.Errorf("handler %d: error %q, want none", i, r.Error)
		}
		total += r.Filled
	}
	covered := map[int64]bool{}
	for i := range handlers {
		for j := range 3 {
			lo := (i*20 + j*30) % 100
			for _, s := range seqs[lo : lo+100] {
				covered[s] = true
			}
		}
	}
	if total != len(covered) {
		t.Fatalf("handlers wrote %d placeholders in total, want each of %d sequences once", total, len(covered))
	}
	f.requirePlaceholders(slices.Sorted(func(yield func(int64) bool) {
		for s := range covered {
			if !yield(s) {
				return
			}
		}
	}))
}

// 10 reports of 100 sequences each cost one check and one insert
// (which also notifies): two statements for 1000 placeholders.
func TestBatchIsOneInsert(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ev := events.SQSEvent{}
	var all []int64
	for i := range 10 {
		xid, seqs := f.abandoned(100)
		all = append(all, seqs...)
		ev.Records = append(ev.Records, events.SQSMessage{
			MessageId: fmt.Sprintf("m%d", i), Body: body(t, report.Report{XID: xid, HasXID: true, Sequences: seqs}),
			EventSourceARN: f.srcARN,
		})
	}
	res := process(f.svc, context.Background(), ev)
	if res.Filled != 1000 {
		t.Errorf("Filled = %d, want 1000", res.Filled)
	}
	wantFailedItems(t, "the batch", res)
	if res.Statements != 2 {
		t.Errorf("Statements = %d, want 2 (check, one insert that notifies)", res.Statements)
	}
	f.requirePlaceholders(all)
}

// The database unreachable. The messages are reported failed after
// the configured retries and stay on the queue; once the database is back,
// their redelivery fills them.
func TestDatabaseUnreachableThenRedeliveryFills(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"COMPENSATE_RETRY_ATTEMPTS": "2", "COMPENSATE_RETRY_INTERVAL": "100ms"})
	ctx := context.Background()
	// The source queue hands a failed message out again after 1s.
	if _, err := f.sqs.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(f.src), Attributes: map[string]string{"VisibilityTimeout": "1"}}); err != nil {
		t.Fatal(err)
	}
	first := f.rollback(2)
	second := f.rollback(3)

	down, err := pgxpool.New(ctx, "postgres://nobody@127.0.0.1:"+unusedPort(t)+"/nowhere?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	ev := f.receive(2, 10*time.Second)
	res := process(f.service(down), ctx, ev)
	if res.Failed != 2 {
		t.Errorf("Failed = %d, want both messages", res.Failed)
	}
	wantFailedItems(t, "database down", res, ev.Records[0].MessageId, ev.Records[1].MessageId)
	if res.Retries != 2 {
		t.Errorf("Retries = %d, want 2", res.Retries)
	}
	if res.Statements != 3 {
		t.Errorf("Statements = %d, want 3 (a try and 2 retries)", res.Statements)
	}
	f.settle(ev, res.Response())
	f.requireMissing(append(slices.Clone(first), second...))

	// The database is back (a working pool): redelivery fills everything.
	ev = f.receive(2, 10*time.Second)
	for _, m := range ev.Records {
		if m.Attributes["ApproximateReceiveCount"] != "2" {
			t.Errorf("message %s receive count %q, want a redelivery", m.MessageId, m.Attributes["ApproximateReceiveCount"])
		}
	}
	res = process(f.svc, ctx, ev)
	if res.Filled != 5 {
		t.Errorf("after recovery: Filled = %d, want 5", res.Filled)
	}
	wantFailedItems(t, "after recovery", res)
	f.requirePlaceholders(append(first, second...))
}

// COMPENSATE_RETRY_ATTEMPTS counts retries after the first try (§5:
// "retried N times"): 0 tries once.
func TestZeroRetriesTriesOnce(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"COMPENSATE_RETRY_ATTEMPTS": "0"})
	f.rollback(1)
	down, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:"+unusedPort(t)+"/nowhere?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	res := process(f.service(down), context.Background(), f.receive(1, 10*time.Second))
	if res.Failed != 1 {
		t.Errorf("Failed = %d, want 1", res.Failed)
	}
	if res.Retries != 0 {
		t.Errorf("Retries = %d, want 0", res.Retries)
	}
	if res.Statements != 1 {
		t.Errorf("Statements = %d, want the one try", res.Statements)
	}
}

// unusedPort is a local port with nothing listening.
func unusedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	return port
}

// A connection the server dropped (here: terminated by an administrator,
// SQLSTATE 57P01) is not reused: the next batch runs on a fresh connection
// and succeeds, retrying if it hit the dead one. Straight to the server in
// both test modes: behind PgBouncer the server connection it kills is the
// pooler's, and the pooler, not the handler, meets the drop.
func TestDroppedConnectionReopened(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ctx := context.Background()
	app := "cmp-drop-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	pc, err := pg.PoolConfig(ctx, pg.Login{URL: f.db.DirectURL}, pg.Options{ApplicationName: app})
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	svc := f.service(pool)

	for round := range 3 {
		xid, seqs := f.abandoned(2)
		ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m", EventSourceARN: f.srcARN,
			Body: body(t, report.Report{XID: xid, HasXID: true, Sequences: seqs})}}}
		res := process(svc, ctx, ev)
		if res.Filled != 2 {
			t.Fatalf("round %d: Filled = %d, want 2; %v", round, res.Filled, res)
		}
		wantFailedItems(t, fmt.Sprintf("round %d", round), res)
		t.Logf("round %d: %d retries", round, res.Retries)
		if killed := f.db.KillSessions(t, app); killed != 1 {
			t.Fatalf("terminated %d of the handler's connections, want its one", killed)
		}
	}
}

// A savepoint rolled back inside a committed transaction. The
// report carries the committed xid; only the missing sequences are filled,
// the committed ones stay real.
func TestSavepointRollbackInCommittedTx(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ctx := context.Background()
	var kept, lost []int64
	err := f.outbox().InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
		a, err := tx.Publish(ctx, "orders", payloads(1)...)
		if err != nil {
			return err
		}
		_ = tx.Savepoint(ctx, func(ctx context.Context, sp *outbox.Tx) error {
			if lost, err = sp.Publish(ctx, "orders", payloads(2)...); err != nil {
				return err
			}
			return errRollback
		})
		b, err := tx.Publish(ctx, "orders", payloads(1)...)
		kept = append(a, b...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := f.receive(1, 10*time.Second) // InTx reported the savepoint's sequences
	res := process(f.svc, ctx, ev)
	if res.Filled != 2 {
		t.Errorf("Filled = %d, want the 2 rolled-back sequences", res.Filled)
	}
	wantFailedItems(t, "the batch", res)
	f.requirePlaceholders(lost)
	for s, r := range f.rows(kept) {
		if !r.Real {
			t.Errorf("committed sequence %d touched: %+v", s, r)
		}
	}
	// The same committed xid naming a committed sequence too: only the
	// missing ones would be written, the committed row is kept.
	var rep report.Report
	if rep, err = report.Parse([]byte(ev.Records[0].Body), 100); err != nil {
		t.Fatal(err)
	}
	rep.Sequences = append(rep.Sequences, kept...)
	slices.Sort(rep.Sequences)
	ev.Records[0].Body = body(t, rep)
	res = process(f.svc, ctx, ev)
	if res.Filled != 0 {
		t.Errorf("widened report: Filled = %d, want 0", res.Filled)
	}
	if res.AlreadyPresent != 4 {
		t.Errorf("widened report: AlreadyPresent = %d, want 4", res.AlreadyPresent)
	}
}

// Construction refuses a bad configuration, naming the field.
func TestNewRefusesABadConfigurationNamingTheField(t *testing.T) {
	t.Parallel()
	db, client := new(pgxpool.Pool), &sqs.Client{}
	if _, err := compensate.New(db, compensate.Config{}, compensate.Options{SQS: client}); err != nil {
		t.Fatalf("the defaults refused: %v", err)
	}
	if _, err := compensate.New(nil, compensate.Config{}, compensate.Options{SQS: client}); err == nil {
		t.Error("nil db accepted")
	}
	if _, err := compensate.New(db, compensate.Config{}, compensate.Options{}); err == nil {
		t.Error("nil SQS client accepted")
	}
	for field, cfg := range map[string]compensate.Config{
		"Schema":        {Schema: "Not-A-Schema"},
		"Defer":         {Defer: 1500 * time.Millisecond},
		"RetryAttempts": {RetryAttempts: -2},
		"MaxSequences":  {MaxSequences: -1},
		"MaxDeferrals":  {MaxDeferrals: -1},
		"DLQURL":        {DLQURL: "dlq"},
	} {
		_, err := compensate.New(db, cfg, compensate.Options{SQS: client})
		var se *setting.Error
		if !errors.As(err, &se) {
			t.Errorf("%s: err = %v, want a *setting.Error", field, err)
			continue
		}
		if se.Field != field {
			t.Errorf("%s: the error names %s", field, se.Field)
		}
	}
}

// An xid exactly one epoch (2^32) above a running writer's: pg_locks shows
// 32-bit xids, so without the epoch bound it would match the writer's lock
// and be deferred as "in progress" forever instead of refused as future.
func TestFutureXIDOneEpochAboveRunningWriterIsBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ctx := context.Background()
	tx, seqs := f.openWriter(1)
	xid := xidOf(t, tx) + 1<<32
	f.send(body(t, report.Report{XID: xid, HasXID: true, Sequences: seqs}))
	ev := f.receive(1, 10*time.Second)
	res := process(f.svc, ctx, ev)
	if res.Invalid != 1 {
		t.Errorf("Invalid = %d, want the report refused as bad input", res.Invalid)
	}
	if res.Deferred != 0 {
		t.Errorf("Deferred = %d, want 0", res.Deferred)
	}
	wantFailedItems(t, "the batch", res)
	got := sqstest.Drain(t, f.sqs, f.dlq, 1, 10*time.Second)
	if len(got) != 1 {
		t.Fatalf("DLQ holds %d messages, want 1: %+v", len(got), got)
	}
	if reason := aws.ToString(got[0].MessageAttributes["error"].StringValue); !strings.Contains(reason, "in the future") {
		t.Errorf("DLQ reason %q, want it refused as in the future", reason)
	}
	f.requireMissing(seqs)
}

// §3.4: a report without an xid is trusted as its owner's word, as the
// reference does: filled at once with no status check, and still never
// over a row that exists — the insert is what keeps it sound.
func TestReportWithoutXIDIsOwnerTrusted(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ctx := context.Background()
	kept := f.commit(1)
	_, burned := f.abandoned(2)
	f.send(body(t, report.Report{Sequences: append(slices.Clone(burned), kept...)}))
	res := process(f.svc, ctx, f.receive(1, 10*time.Second))
	if res.Filled != 2 {
		t.Errorf("Filled = %d, want the 2 burned sequences", res.Filled)
	}
	if res.AlreadyPresent != 1 {
		t.Errorf("AlreadyPresent = %d, want the committed one", res.AlreadyPresent)
	}
	wantFailedItems(t, "the batch", res)
	f.requirePlaceholders(burned)
	if r := f.rows(kept)[kept[0]]; !r.Real {
		t.Errorf("committed sequence %d overwritten: %+v", kept[0], r)
	}
}
