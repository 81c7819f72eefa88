package compensate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// item is one message through the batch.
type item struct {
	msg *events.SQSMessage
	rep report.Report
	// outcome is decided by parse or decide and carried out by settle;
	// reason says why (empty for Filled).
	outcome Outcome
	reason  string
	// err is the database error that kept the batch from deciding or
	// filling this message; settle reports it failed.
	err error
}

// batch is one invocation's working state.
type batch struct {
	s *Service
	// run bounds every statement and retry by the budget's end; its Q
	// sends the batch's statements, and insertQ is the same with a lock
	// wait of its own (heldRowWait).
	run     *pass.Run
	insertQ *pass.Counting
	items   []item
	res     *Result
}

// heldRowWait bounds the placeholder insert's wait on a row lock. A report
// that passed the check names sequences whose writer has finished, so no
// uncommitted row of that writer can hold them; a wait means another, live
// writer holds one — a forged or mistaken report — and must not hold the
// rest of the batch for the whole budget. Concurrent handlers filling the
// same sequences wait on each other for a commit, milliseconds.
const heldRowWait = time.Second

// RunOnce handles one batch of messages: parse, decide, fill, settle. A
// failure is reported per message in the Result, never as an error for the
// whole batch; the error is only ever the caller's context ending.
func (s *Service) RunOnce(ctx context.Context, ev events.SQSEvent) (*Result, error) {
	run := s.kit.Begin(ctx)
	b := &batch{
		s:       s,
		run:     run,
		insertQ: run.Querier(heldRowWait),
		res:     &Result{Received: len(ev.Records), Messages: []Message{}},
	}
	b.parse(ev)
	b.decide(ctx)
	b.fill(ctx)
	b.settle(ctx)
	b.res.Retries = run.Retries
	// The batch's error is per message (Result.Error); the pass's is only
	// ever the invocation's context ending.
	_ = run.Close(&b.res.Summary, nil)
	if err := ctx.Err(); err != nil {
		return b.res, fmt.Errorf("compensate: handle the batch: %w", err)
	}
	return b.res, nil
}

// parse validates every body; a report that cannot be parsed is Invalid
// before the database is asked anything.
func (b *batch) parse(ev events.SQSEvent) {
	b.items = make([]item, len(ev.Records))
	for i := range ev.Records {
		it := &b.items[i]
		it.msg = &ev.Records[i]
		rep, err := report.Parse([]byte(it.msg.Body), b.s.cfg.MaxSequences)
		if err != nil {
			it.outcome, it.reason = Invalid, reasonOf(err)
			continue
		}
		it.rep = rep
	}
}

// decide reads the head and every distinct writer's status in one
// statement and decides each parsed report.
func (b *batch) decide(ctx context.Context) {
	pending := b.where(func(it *item) bool { return it.outcome == 0 })
	if len(pending) == 0 {
		return
	}
	var check Check
	err := b.retry(ctx, func(ctx context.Context) error {
		var err error
		check, err = b.s.check(ctx, b.run.Q, distinctXIDs(pending))
		return err
	})
	if future := check.future(); err == nil && len(future) > 0 {
		// Rare: a report naming an xid at or above xmax that holds no
		// lock. Either it is bogus, or its writer finished between the
		// snapshot and the lock read; a fresh snapshot tells which.
		err = b.retry(ctx, func(ctx context.Context) error {
			again, err := b.s.check(ctx, b.run.Q, future)
			maps.Copy(check.Status, again.Status)
			return err
		})
	}
	if err != nil {
		b.failAll(pending, fmt.Errorf("check: %w", err))
		return
	}
	b.res.Head = check.Head
	for _, it := range pending {
		it.outcome, it.reason = Decide(it.rep, receiveCount(it.msg), check, b.s.cfg.MaxDeferrals)
	}
}

// fill writes one insert for every sequence of every Filled report.
//
// No transaction spans the check and the insert, on purpose: a transaction
// would hold a snapshot (and, once the insert assigns an xid, the fill
// function's proof horizon) for nothing, because the check's facts cannot
// go stale in the unsafe direction:
//   - committed, aborted and "too old" are final: a finished writer never
//     writes again, so its missing sequences stay missing;
//   - an "in progress" writer is deferred, never filled, so a writer that
//     commits between the check and the insert is never raced;
//   - the head only grows, so "at or below the head" stays true;
//   - whatever row does exist — committed by the writer (a COMMIT that in
//     fact landed before an InTx report), written by the fill function or by
//     a concurrent compensate — is kept by ON CONFLICT DO NOTHING, which
//     never overwrites (§3.5). A row still uncommitted makes the insert wait
//     for its writer and then skip the row if it committed.
//
// So each statement is safe alone, and each is idempotent, which is also
// why retrying one after a dropped connection is safe.
//
// One message can never hold the others back: the insert waits at most
// heldRowWait on a row lock, and when it gives up the batch is split, one
// insert per message, so only a message whose sequences another live
// writer holds is deferred and every other one is filled.
func (b *batch) fill(ctx context.Context) {
	fillable := b.where(func(it *item) bool { return it.outcome == Filled })
	if len(fillable) == 0 {
		return
	}
	err := b.insert(ctx, fillable)
	if pass.IsLockTimeout(err) && len(fillable) > 1 {
		for _, it := range fillable {
			b.settleInsert(it, b.insert(ctx, []*item{it}))
		}
		return
	}
	for _, it := range fillable {
		b.settleInsert(it, err)
	}
}

// settleInsert records what the insert of it's sequences came to.
func (b *batch) settleInsert(it *item, err error) {
	switch {
	case err == nil:
	case pass.IsLockTimeout(err):
		it.outcome, it.reason = heldByLiveWriter(receiveCount(it.msg), b.s.cfg.MaxDeferrals)
	default:
		it.err = fmt.Errorf("insert: %w", err)
	}
}

// heldByLiveWriter is what happens to a report whose insert waited on a
// live writer's row: deferred like a report whose own writer still runs,
// and, after as many receives, dropped and left to the fill function, which
// proves its gaps on its own. Never filled on a guess, never bad input: the
// report may be an honest one racing a writer that has not ended yet.
func heldByLiveWriter(receives, maxDeferrals int) (Outcome, string) {
	const why = "a sequence it names is held by a live writer's uncommitted row"
	if receives >= maxDeferrals {
		return Dropped, why + fmt.Sprintf(" after %d receives; left to the fill function", receives)
	}
	return Deferred, why
}

// insert writes the placeholders for the sequences of items in one
// statement and adds what it wrote to the result.
func (b *batch) insert(ctx context.Context, items []*item) error {
	set := map[int64]struct{}{}
	for _, it := range items {
		for _, seq := range it.rep.Sequences {
			set[seq] = struct{}{}
		}
	}
	// Ascending order matters: concurrent handlers inserting overlapping
	// sets in the same order wait on each other's speculative insertions
	// in one direction only, so they cannot deadlock (and a deadlock would
	// only cost a retry anyway).
	seqs := slices.Sorted(maps.Keys(set))
	var wrote store.Written
	err := b.retry(ctx, func(ctx context.Context) error {
		var err error
		wrote, err = b.s.events.InsertPlaceholders(ctx, b.insertQ, seqs, store.FilledByCompensate)
		return err
	})
	if err != nil {
		return err
	}
	b.res.Filled += int(wrote.N)
	b.res.AlreadyPresent += len(seqs) - int(wrote.N)
	if wrote.N > 0 {
		// Notified by the insert statement itself.
		r := b.res.FilledRange
		if r == nil {
			b.res.FilledRange = []int64{wrote.Min, wrote.Max}
		} else {
			b.res.FilledRange = []int64{min(r[0], wrote.Min), max(r[1], wrote.Max)}
		}
	}
	return nil
}

// settle carries out each message's outcome (the DLQ, a deferral) and
// writes the per-message result and the partial batch response.
func (b *batch) settle(ctx context.Context) {
	var errs []error
	for i := range b.items {
		it := &b.items[i]
		if it.err != nil && !slices.ContainsFunc(errs, func(e error) bool { return errors.Is(e, it.err) }) {
			errs = append(errs, it.err)
		}
		b.res.Messages = append(b.res.Messages, b.settleOne(ctx, it))
	}
	if err := errors.Join(errs...); err != nil {
		b.res.Error = err.Error()
	}
}

func (b *batch) settleOne(ctx context.Context, it *item) Message {
	s, res := b.s, b.res
	switch {
	case it.err != nil:
		// Nothing is lost: SQS hands it out again after its visibility
		// timeout, and after maxReceiveCount moves it to the redrive DLQ;
		// whatever is still missing by then the fill function proves and
		// fills.
		return b.failed(it, "database unavailable: "+it.err.Error())
	case it.outcome == Invalid && s.cfg.DLQURL == "":
		res.Invalid++
		// The queue's own redrive policy moves it after maxReceiveCount.
		s.kit.Warn(ctx, "bad rollback report and no COMPENSATE_DLQ_URL: reported failed for the redrive policy",
			slog.String("message_id", it.msg.MessageId), slog.String("reason", it.reason))
		return b.failed(it, "invalid: "+it.reason+" (no DLQ configured)")
	case it.outcome == Invalid:
		res.Invalid++
		if err := s.toDLQ(ctx, it); err != nil {
			// Not deleted from the source queue, so it is not lost either.
			return b.failed(it, "invalid: "+it.reason+"; DLQ send failed: "+err.Error())
		}
	case it.outcome == Deferred:
		res.Deferred++
		if err := s.deferMessage(ctx, it.msg); err != nil {
			// Still reported failed: it comes back after the queue's
			// visibility timeout instead of COMPENSATE_DEFER.
			it.reason += "; visibility change failed: " + err.Error()
		}
		res.failures = append(res.failures, events.SQSBatchItemFailure{ItemIdentifier: it.msg.MessageId})
	case it.outcome == Dropped:
		res.Dropped++
		s.kit.Warn(ctx, "writer still in progress after the maximum deferrals; dropping the report, the fill function will prove and fill these sequences",
			slog.String("message_id", it.msg.MessageId), slog.Uint64("xid", it.rep.XID),
			slog.Int("sequences", len(it.rep.Sequences)), slog.Int("receive_count", receiveCount(it.msg)))
	case it.outcome != Filled:
		return b.failed(it, fmt.Sprintf("no outcome decided (%v)", it.outcome))
	}
	return Message{MessageID: it.msg.MessageId, Outcome: it.outcome, Reason: it.reason}
}

// failed reports it failed, so SQS hands it out again.
func (b *batch) failed(it *item, reason string) Message {
	b.res.Failed++
	b.res.failures = append(b.res.failures, events.SQSBatchItemFailure{ItemIdentifier: it.msg.MessageId})
	return Message{MessageID: it.msg.MessageId, Outcome: Failed, Reason: reason}
}

// where lists the items cond holds for.
func (b *batch) where(cond func(*item) bool) []*item {
	var out []*item
	for i := range b.items {
		if cond(&b.items[i]) {
			out = append(out, &b.items[i])
		}
	}
	return out
}

// failAll marks items as kept from their outcome by err.
func (b *batch) failAll(items []*item, err error) {
	for _, it := range items {
		it.err = err
	}
}

// retry runs fn until it succeeds, fails for good, or the retries
// (RetryAttempts after the first try) or the budget run out. Each attempt
// is bounded by the budget's end, so a hung connection cannot overrun the
// Lambda deadline.
func (b *batch) retry(ctx context.Context, fn func(context.Context) error) error {
	policy := pass.RetryPolicy{Every: b.s.cfg.retryInterval(), Attempts: b.s.cfg.retries()}
	return b.run.Retry(ctx, policy, func(ctx context.Context) error {
		actx, cancel := context.WithDeadline(ctx, b.run.End)
		defer cancel()
		return fn(actx)
	})
}

// receiveCount is SQS's ApproximateReceiveCount, 1 when absent (the event
// source mapping always sends it; a hand-made event may not).
func receiveCount(m *events.SQSMessage) int {
	n, err := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

func distinctXIDs(items []*item) []uint64 {
	seen := map[uint64]bool{}
	out := []uint64{}
	for _, it := range items {
		if it.rep.HasXID && !seen[it.rep.XID] {
			seen[it.rep.XID] = true
			out = append(out, it.rep.XID)
		}
	}
	return out
}

func reasonOf(err error) string {
	var inv *report.InvalidError
	if errors.As(err, &inv) {
		return inv.Reason
	}
	return err.Error()
}
