package compensate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// Bad input: a report the handler cannot act on goes to the DLQ with its
// reason, or is reported failed for the queue's redrive policy; it never
// writes a placeholder.

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
	counts.Want(t, "",
		counts.Of("Filled", res.Filled, 2, "the good report's"),
		counts.Of("Invalid", res.Invalid, len(bad)),
		counts.Of("Failed", res.Failed, 0, "bad input sent to the DLQ is handled"),
	)
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
	counts.Want(t, "",
		counts.Of("Filled", res.Filled, 1, "the good report's"),
		counts.Of("Invalid", res.Invalid, 1),
		counts.Of("Failed", res.Failed, 1),
	)
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
	counts.Want(t, "",
		counts.Of("Invalid", res.Invalid, 1, "the report refused as bad input"),
		counts.Of("Deferred", res.Deferred, 0),
	)
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
