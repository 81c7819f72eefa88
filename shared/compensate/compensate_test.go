package compensate_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/settingtest"
	"github.com/outboxkeeper/outboxkeeper/shared/compensate"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// What the handler does with good reports: fill at once and exactly,
// never overwrite, one insert a batch, concurrent handlers each sequence
// once (the helpers are in helpers_test.go).

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

	counts.Want(t, "",
		counts.Of("Filled", res.Filled, 3),
		counts.Of("AlreadyPresent", res.AlreadyPresent, 0),
	)
	wantFailedItems(t, "the batch", res)
	f.requirePlaceholders(lost)
	// Within a tick of the fill's: the consumer can read past the gap as
	// soon as one batch was handled, before the fill's next look at it.
	if elapsed >= 4*fill.DefaultTick {
		t.Errorf("handling took %s, not within four fill ticks (%s)", elapsed, 4*fill.DefaultTick)
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
	counts.Want(t, "redelivery",
		counts.Of("Filled", res.Filled, 0),
		counts.Of("AlreadyPresent", res.AlreadyPresent, 4),
	)
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
	counts.Want(t, "",
		counts.Of("Filled", res.Filled, 0),
		counts.Of("AlreadyPresent", res.AlreadyPresent, 3),
	)
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
	counts.Want(t, "",
		counts.Of("Filled", res.Filled, 0),
		counts.Of("AlreadyPresent", res.AlreadyPresent, 1, "pruned counts as present"),
	)
	wantFailedItems(t, "the batch", res)
	f.requireMissing(seqs[:1])
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
	counts.Want(t, "second delivery",
		counts.Of("Filled", second.Filled, 0),
		counts.Of("AlreadyPresent", second.AlreadyPresent, 3),
	)
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
	counts.Want(t, "",
		counts.Of("Filled", res.Filled, 1000),
		counts.Of("Statements", int(res.Statements), 2, "check, one insert that notifies"),
	)
	wantFailedItems(t, "the batch", res)
	f.requirePlaceholders(all)
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
	counts.Want(t, "widened report",
		counts.Of("Filled", res.Filled, 0),
		counts.Of("AlreadyPresent", res.AlreadyPresent, 4),
	)
}

// Construction refuses a bad configuration, naming the field.
func TestNewRefusesABadConfigurationNamingTheField(t *testing.T) {
	t.Parallel()
	db, client := new(pgxpool.Pool), &sqs.Client{}
	if _, err := compensate.New(db, compensate.Config{}, compensate.Options{SQS: client}); err != nil {
		t.Fatalf("the defaults refused: %v", err)
	}
	if _, err := compensate.New(db, compensate.Config{}, compensate.Options{}); err == nil {
		t.Error("nil SQS client accepted")
	}
	settingtest.Refuses(t, db, map[string]compensate.Config{
		"Schema":        {Schema: "Not-A-Schema"},
		"Defer":         {Defer: 1500 * time.Millisecond},
		"RetryAttempts": {RetryAttempts: -2},
		"MaxSequences":  {MaxSequences: -1},
		"MaxDeferrals":  {MaxDeferrals: -1},
		"DLQURL":        {DLQURL: "dlq"},
	}, compensate.New, compensate.Options{SQS: client})
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
	counts.Want(t, "",
		counts.Of("Filled", res.Filled, 2, "the 2 burned sequences"),
		counts.Of("AlreadyPresent", res.AlreadyPresent, 1, "the committed one"),
	)
	wantFailedItems(t, "the batch", res)
	f.requirePlaceholders(burned)
	if r := f.rows(kept)[kept[0]]; !r.Real {
		t.Errorf("committed sequence %d overwritten: %+v", kept[0], r)
	}
}
