package compensate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// One hostile report can never hold a batch: a report carrying a finished
// (aborted) xid but naming a sequence that another, live writer holds would
// make the batch's insert wait on that writer's row for the whole budget.
// The insert gives up on the row lock and the batch is split, so the nine
// honest reports are filled and only the hostile one is deferred.
func TestHostileReportDeferredWhileTheBatchFills(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ctx := context.Background()
	live, held := f.openWriter(1)             // a live writer's uncommitted row
	defer live.Rollback(context.Background()) //nolint:errcheck
	aborted, _ := f.abandoned(1)              // a finished xid to forge the report with

	ev := events.SQSEvent{}
	var honest []int64
	for i := range 9 {
		xid, seqs := f.abandoned(2)
		honest = append(honest, seqs...)
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprint("honest-", i), EventSourceARN: f.srcARN,
			Body: body(t, report.Report{XID: xid, HasXID: true, Sequences: seqs})})
	}
	ev.Records = append(ev.Records, events.SQSMessage{MessageId: "hostile", EventSourceARN: f.srcARN,
		Body: body(t, report.Report{XID: aborted, HasXID: true, Sequences: held})})

	start := time.Now()
	res := process(f.svc, ctx, ev)
	took := time.Since(start)

	counts.Want(t, "",
		counts.Of("Filled", res.Filled, len(honest), "the sequences of the nine honest reports"),
		counts.Of("Deferred", res.Deferred, 1, "the hostile report alone"),
	)
	if got := outcomes(res)["hostile"]; got != "deferred" {
		t.Errorf("hostile report: %s, want deferred", got)
	}
	for i := range 9 {
		if got := outcomes(res)[fmt.Sprint("honest-", i)]; got != "filled" {
			t.Errorf("honest report %d: %s, want filled", i, got)
		}
	}
	if got := failedIDs(res.Response()); len(got) != 1 || got[0] != "hostile" {
		t.Errorf("failed items %v, want only the hostile report handed out again", got)
	}
	if took >= 5*time.Second {
		t.Errorf("the batch took %s: the hostile report held it back", took)
	}
	f.requirePlaceholders(honest)
	// The live writer's row is untouched: it may still commit.
	if _, err := live.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("the live writer lost its transaction: %v", err)
	}
	if err := live.Commit(ctx); err != nil {
		t.Fatalf("the live writer could not commit: %v", err)
	}
	for s, r := range f.rows(held) {
		if !r.Real {
			t.Errorf("sequence %d of the live writer: %+v, want its committed row", s, r)
		}
	}
}

// The split costs nothing when nothing waits: an honest batch is still one
// check and one insert.
func TestHonestBatchIsStillOneInsert(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ev := events.SQSEvent{}
	for i := range 3 {
		xid, seqs := f.abandoned(2)
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprint("m", i), EventSourceARN: f.srcARN,
			Body: body(t, report.Report{XID: xid, HasXID: true, Sequences: seqs})})
	}
	res := process(f.svc, context.Background(), ev)
	counts.Want(t, "",
		counts.Of("Statements", int(res.Statements), 2, "the check and one insert"),
		counts.Of("Filled", res.Filled, 6),
	)
}
