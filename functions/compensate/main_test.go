package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/esm"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
	"github.com/outboxkeeper/outboxkeeper/shared/sqsreport"
)

// world is an end-to-end setup: a database with writers reporting through
// shared/outbox's Reporter to a fauxqs queue whose redrive policy moves a
// message to a redrive DLQ after maxReceiveCount receives, and the real
// bootstrap under aws-lambda-rie.
type world struct {
	db      *testdb.DB
	sqs     *sqs.Client
	src     string
	srcARN  string
	redrive string
	outbox  *outbox.Outbox
	fn      *lambdatest.Function
}

const maxReceiveCount = 2

func newWorld(t *testing.T, env map[string]string) *world {
	t.Helper()
	w := &world{db: testdb.New(t), sqs: sqstest.Client(t)}
	// A 1s visibility timeout stands in for the template's (≥ 6 × the
	// function timeout) so a failed message comes back quickly.
	q := sqstest.NewRedrivenQueue(t, w.sqs, "e2e", maxReceiveCount, map[string]string{"VisibilityTimeout": "1"})
	w.src, w.srcARN, w.redrive = q.URL, q.ARN, q.Redrive
	reporter, err := sqsreport.New(w.sqs, w.src, sqsreport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w.outbox, err = outbox.New(w.db.Pool, outbox.Options{Reporter: reporter}); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DATABASE_URL": w.db.URL, "COMPENSATE_RETRY_INTERVAL": "100ms"}
	for k, v := range env {
		vars[k] = v
	}
	w.fn = lambdatest.Start(t, lambdatest.Build(t, "compensate"), vars)
	return w
}

var errRollback = errors.New("roll back")

// rollback runs a writer that publishes n events and rolls back; InTx
// reports the sequences to the source queue through the Reporter.
func (w *world) rollback(t *testing.T, n int) []int64 {
	t.Helper()
	var seqs []int64
	err := w.outbox.InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
		payloads := make([]any, n)
		for i := range payloads {
			payloads[i] = map[string]int{"i": i}
		}
		var err error
		if seqs, err = tx.Publish(ctx, "orders", payloads...); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("InTx = %v, want the rollback error", err)
	}
	if strings.Contains(err.Error(), "report") {
		t.Fatalf("InTx = %v, want the rollback error alone: the report failed", err)
	}
	return seqs
}

// pump plays the SQS event source mapping for a while: long-poll a batch
// (all system attributes, so ApproximateReceiveCount is there), invoke the
// function with the event Lambda would build, delete what succeeded, leave
// the failed items to the visibility timeout. It stops when done says so.
func (w *world) pump(t *testing.T, timeout time.Duration, done func() bool) (invocations int) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("event source mapping: not done after %s (%d invocations)\nfunction logs:\n%s", timeout, invocations, w.fn.Logs())
		}
		out, err := w.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(w.src),
			MaxNumberOfMessages:         10,
			WaitTimeSeconds:             1,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			continue
		}
		ev := esm.Event(w.srcARN, "us-east-1", out.Messages)
		var resp events.SQSEventResponse
		if err := w.fn.InvokeJSON(ctx, ev, &resp); err != nil {
			t.Fatalf("invoke: %v\n%s", err, w.fn.Logs())
		}
		invocations++
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		for _, m := range ev.Records {
			if !failed[m.MessageId] {
				if _, err := w.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(w.src), ReceiptHandle: aws.String(m.ReceiptHandle)}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return invocations
}

// filledBy is filled_by ("" for a real event) of those of seqs that exist.
func (w *world) filledBy(t *testing.T, seqs []int64) map[int64]string {
	t.Helper()
	rows, err := w.db.Pool.Query(context.Background(),
		`SELECT sequence, coalesce(filled_by, '') FROM `+w.db.Schema.Table("events")+` WHERE sequence = ANY($1)`, seqs)
	if err != nil {
		t.Fatal(err)
	}
	type filled struct {
		Sequence int64
		By       string
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[filled])
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[int64]string, len(list))
	for _, r := range list {
		out[r.Sequence] = r.By
	}
	return out
}

func (w *world) allFilled(t *testing.T, seqs []int64) bool {
	t.Helper()
	got := w.filledBy(t, seqs)
	for _, s := range seqs {
		if got[s] != "compensate" {
			return false
		}
	}
	return true
}

// Rollback reports sent by the Reporter reach the real bootstrap
// as an SQS event batch and are filled; a malformed message with no
// COMPENSATE_DLQ_URL keeps failing and the queue's redrive policy moves it
// to the redrive DLQ after maxReceiveCount receives.
func TestEndToEndRedrive(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil) // no COMPENSATE_DLQ_URL
	a := w.rollback(t, 3)
	b := w.rollback(t, 2)
	const garbage = `{"v":1,"sequences":[1,` // malformed, body must survive unchanged
	if _, err := w.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(w.src), MessageBody: aws.String(garbage)}); err != nil {
		t.Fatal(err)
	}

	var moved []sqstypes.Message
	w.pump(t, 30*time.Second, func() bool {
		if len(moved) == 0 {
			moved = receiveAll(t, w.sqs, w.redrive)
		}
		return len(moved) > 0 && w.allFilled(t, append(append([]int64{}, a...), b...))
	})
	if len(moved) != 1 {
		t.Fatalf("redrive DLQ holds %d messages, want the malformed one: %v", len(moved), moved)
	}
	if body := aws.ToString(moved[0].Body); body != garbage {
		t.Errorf("redrive DLQ body %q, want the malformed body %q unchanged", body, garbage)
	}
	if n, _ := strconv.Atoi(moved[0].Attributes["ApproximateReceiveCount"]); n < maxReceiveCount {
		t.Errorf("moved after %d receives, want at least %d", n, maxReceiveCount)
	}
	// One JSON log line per invocation, with the request id; the bad
	// message is logged as undeliverable to a DLQ.
	count := func(logs string) (batches, undeliverable int) {
		for _, rec := range lambdatest.JSONLines(logs) {
			msg, _ := rec["message"].(string)
			switch {
			case msg == "compensate batch" && rec["requestId"] != nil:
				batches++
			case strings.Contains(msg, "no COMPENSATE_DLQ_URL"):
				undeliverable++
			}
		}
		return batches, undeliverable
	}
	logs := w.fn.AwaitLogs(func(l string) bool {
		b, u := count(l)
		return b > 0 && u >= maxReceiveCount && strings.Contains(l, `"Namespace":"Outboxkeeper"`)
	})
	batches, undeliverable := count(logs)
	if batches == 0 {
		t.Errorf("no batch log line with a requestId:\n%s", logs)
	}
	if undeliverable < maxReceiveCount {
		t.Errorf("%d log lines about the undeliverable bad input, want one a receive (%d):\n%s", undeliverable, maxReceiveCount, logs)
	}
	if !strings.Contains(logs, `"Namespace":"Outboxkeeper"`) {
		t.Errorf("no EMF metrics line:\n%s", logs)
	}
}

// With COMPENSATE_DLQ_URL set, bad input goes to that DLQ at once with its
// reason, and is deleted from the source queue (never redelivered); the
// good report of the same batch fills.
func TestEndToEndBadInputToDLQ(t *testing.T) {
	t.Parallel()
	client := sqstest.Client(t)
	dlq := sqstest.NewQueue(t, client, "e2e-dlq", nil)
	w := newWorld(t, map[string]string{"COMPENSATE_DLQ_URL": dlq})
	good := w.rollback(t, 2)
	head, err := w.outbox.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	bodies, _ := report.Encode(report.Report{Sequences: []int64{head + 5}}, 0)
	above := string(bodies[0])
	if _, err := w.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(w.src), MessageBody: aws.String(above)}); err != nil {
		t.Fatal(err)
	}
	var got []sqstypes.Message
	w.pump(t, 20*time.Second, func() bool {
		got = append(got, receiveAll(t, w.sqs, dlq)...)
		return len(got) > 0 && w.allFilled(t, good)
	})
	if len(got) != 1 {
		t.Fatalf("DLQ holds %d messages, want the bad one: %+v", len(got), got)
	}
	if body := aws.ToString(got[0].Body); body != above {
		t.Errorf("DLQ body %q, want %q unchanged", body, above)
	}
	if reason := aws.ToString(got[0].MessageAttributes["error"].StringValue); !strings.Contains(reason, "above the allocation head") {
		t.Errorf("DLQ reason %q, want it to name the allocation head", reason)
	}
	if moved := receiveAll(t, w.sqs, w.redrive); len(moved) != 0 {
		t.Errorf("bad input was retried until redrive instead of going to the DLQ at once: %v", moved)
	}
}

// receiveAll is one non-waiting receive that deletes what it got.
func receiveAll(t *testing.T, c *sqs.Client, url string) []sqstypes.Message {
	t.Helper()
	out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range out.Messages {
		_, _ = c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
	}
	return out.Messages
}
