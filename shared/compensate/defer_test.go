package compensate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// A writer that still runs: its report is deferred, filled once the writer
// rolled back, dropped (left to the fill) after the maximum deferrals.

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
	counts.Want(t, "",
		counts.Of("Deferred", res.Deferred, 1),
		counts.Of("Filled", res.Filled, 0, "while the writer runs"),
	)
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
	counts.Want(t, "after commit",
		counts.Of("Filled", res.Filled, 0),
		counts.Of("AlreadyPresent", res.AlreadyPresent, 2),
	)
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
	counts.Want(t, "first receive",
		counts.Of("Deferred", res.Deferred, 1),
		counts.Of("Dropped", res.Dropped, 0),
	)
	ev = f.receive(1, 10*time.Second) // visible again at once (defer 0s)
	res = process(f.svc, ctx, ev)
	counts.Want(t, "second receive",
		counts.Of("Dropped", res.Dropped, 1),
		counts.Of("Deferred", res.Deferred, 0),
		counts.Of("Failed", res.Failed, 0, "a drop is handled"),
	)
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
