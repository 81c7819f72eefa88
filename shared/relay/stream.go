package relay

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/target"
)

// sendTimeout bounds one send inside the pass budget: a target that
// accepts a connection and never answers costs the pass that much, then
// it tries again, rather than its whole budget.
const sendTimeout = 10 * time.Second

// maxErrorText bounds an error kept in relay_parked.
const maxErrorText = 1000

// step is where a batch step left the stream.
type step int

const (
	// idle: nothing to read after the position.
	idle step = iota
	// progress: a batch went through; look again at once.
	progress
	// failed: some of the batch in hand was not sent; wait, then send it
	// again.
	failed
)

// stream is one pass's place in the stream: the position, the batch in
// hand and the events the target refused that are not parked yet.
type stream struct {
	s   *Service
	res *Result

	position int64
	cur      *batch
	// failing is every event refused and not parked, with its attempts
	// (its relay_parked row).
	failing map[int64]int
	// failures counts failed sends in a row, for the backoff.
	failures int
	// lastFull says the last read returned a whole page.
	lastFull bool
	// ahead is the page after the batch in hand, read while that batch
	// was sent (a whole page says more is waiting), and aheadFrom the
	// sequence it was read after: the next batch once the position gets
	// there, without waiting for a read.
	ahead     []event
	aheadFrom int64
}

// batch is what one read_events call returned, and where each event
// stands.
type batch struct {
	from    int64
	entries []entry
	began   time.Time
	// readAhead says the page after this one was read already.
	readAhead bool
}

func newStream(s *Service, res *Result) *stream {
	return &stream{s: s, res: res, failing: map[int64]int{}}
}

// step is one round of a batch: read one (unless one is in hand), send
// what of it is not sent yet, a round at most (roundSize), record the
// refusals, and commit the position over what is resolved. sendBy bounds
// the send (the pass budget). It answers failed when the round left an
// event unsent for a failure (the pass then waits), progress otherwise.
func (st *stream) step(ctx context.Context, q store.Querier, sendBy time.Time) (step, error) {
	if st.cur == nil {
		n, err := st.next(ctx, q)
		if err != nil || n == 0 {
			return idle, err
		}
	}
	ahead := st.readAhead(ctx, q)
	failedNow, err := st.send(ctx, q, sendBy)
	if r := ahead.wait(); r.err == nil && len(r.events) > 0 {
		st.ahead, st.aheadFrom = r.events, r.after
	}
	if err != nil {
		return 0, err
	}
	if hook := st.s.afterSend; hook != nil {
		hook()
	}
	if err := st.commit(ctx, q); err != nil {
		return 0, err
	}
	if st.cur != nil && failedNow {
		st.failures++
		return failed, nil
	}
	st.failures = 0
	return progress, nil
}

// next takes the next batch: the page read ahead when it starts at the
// position, else a read.
func (st *stream) next(ctx context.Context, q store.Querier) (int, error) {
	if events := st.ahead; events != nil && st.aheadFrom == st.position {
		st.ahead = nil
		st.take(events)
		return len(events), nil
	}
	st.ahead = nil
	return st.read(ctx, q)
}

// aheadRead is a read of the page after the batch in hand, running while
// the batch is sent; nil when none was started.
type aheadRead chan aheadResult

type aheadResult struct {
	after  int64
	events []event
	err    error
}

// readAhead starts reading the page after the batch in hand when that
// batch was a whole page, once per batch. Its result (wait) is taken
// before the step ends, so it never outlives the step: a failed read only
// means the next batch is read when it is due.
func (st *stream) readAhead(ctx context.Context, q store.Querier) aheadRead {
	b := st.cur
	if b.readAhead || len(b.entries) < st.s.cfg.BatchLimit || st.ahead != nil {
		return nil
	}
	b.readAhead = true
	after := b.entries[len(b.entries)-1].seq
	ch := make(aheadRead, 1)
	go func() {
		events, err := st.s.readEvents(ctx, q, after, st.s.cfg.BatchLimit)
		ch <- aheadResult{after: after, events: events, err: err}
	}()
	return ch
}

func (a aheadRead) wait() aheadResult {
	if a == nil {
		return aheadResult{}
	}
	return <-a
}

// read takes the next batch after the position, through read_events: never
// past a sequence whose writer may still commit.
func (st *stream) read(ctx context.Context, q store.Querier) (int, error) {
	events, err := st.s.readEvents(ctx, q, st.position, st.s.cfg.BatchLimit)
	if err != nil || len(events) == 0 {
		return 0, err
	}
	st.take(events)
	return len(events), nil
}

// take makes events, read after the position, the batch in hand.
func (st *stream) take(events []event) {
	st.lastFull = len(events) == st.s.cfg.BatchLimit
	st.cur = &batch{from: st.position, entries: st.s.plan(events), began: st.s.kit.Now()}
	for i := range st.cur.entries {
		if st.cur.entries[i].state == skipped {
			st.res.Skipped++
		}
	}
}

// send sends the batch's entries not sent yet, a round at most, in order
// within each group, and records the target's refusals of events (their
// attempts, parking those that reached RELAY_MAX_ATTEMPTS). failed says
// an event of the round is still unsent for a failure: one failed
// transiently, or was refused and not parked.
func (st *stream) send(ctx context.Context, q store.Querier, sendBy time.Time) (failed bool, err error) {
	entries := st.cur.entries
	idx, refused := toSend(entries)
	idx = idx[:min(len(idx), st.s.round)]
	transient := 0
	if len(idx) > 0 {
		msgs := make([]target.Message, len(idx))
		for k, i := range idx {
			msgs[k] = entries[i].msg
		}
		sctx, cancel := context.WithDeadline(ctx, earliest(sendBy, st.s.kit.Now().Add(sendTimeout)))
		r := st.s.sender.Send(sctx, msgs)
		cancel()
		st.res.Calls += r.Calls
		before := countSent(entries)
		var more []refusal
		more, transient = settle(entries, idx, r.Outcomes)
		refused = append(refused, more...)
		st.res.Sent += int64(countSent(entries) - before)
		st.res.Transient += int64(transient)
		for k, o := range r.Outcomes {
			if o.Status == target.Transient {
				st.res.LastError = fmt.Sprintf("sequence %d: %s: %s", entries[idx[k]].seq, o.Code, o.Message)
				break
			}
		}
	}
	parkedNow := 0
	if len(refused) > 0 {
		if parkedNow, err = st.refuse(ctx, q, refused); err != nil {
			return false, err
		}
	}
	return transient > 0 || len(refused) > parkedNow, nil
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func countSent(entries []entry) int {
	n := 0
	for i := range entries {
		if entries[i].state == sent {
			n++
		}
	}
	return n
}

// refuse records one try more of each refused event, in one statement,
// and parks those whose attempts reached RELAY_MAX_ATTEMPTS; it answers
// how many it parked.
func (st *stream) refuse(ctx context.Context, q store.Querier, refused []refusal) (parkedNow int, err error) {
	entries := st.cur.entries
	n := len(refused)
	seqs, topics, attempts, errs, park := make([]int64, n), make([]string, n), make([]int32, n), make([]string, n), make([]bool, n)
	at, why := make(map[int64]int, n), make(map[int64]string, n)
	for k, r := range refused {
		en := &entries[r.index]
		a, p := tryOutcome(st.failing[en.seq], st.s.cfg.MaxAttempts)
		seqs[k], topics[k], attempts[k], errs[k], park[k] = en.seq, en.topic, int32(a), errorText(r.code, r.message), p
		at[en.seq], why[en.seq] = r.index, errs[k]
	}
	rows, err := q.Query(ctx, st.s.sql.recordRefusals, pgx.NamedArgs{
		"relay": st.s.cfg.Name, "sequences": seqs, "topics": topics, "attempts": attempts, "errors": errs, "park": park,
	})
	if err != nil {
		return 0, fmt.Errorf("record %d refused events: %w", n, err)
	}
	type row struct {
		Sequence int64
		Attempts int
		Parked   bool
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return 0, fmt.Errorf("record %d refused events: %w", n, err)
	}
	for _, r := range got {
		i, ok := at[r.Sequence]
		if !ok {
			continue
		}
		en := &entries[i]
		st.res.Refused++
		msg := why[r.Sequence]
		if r.Parked {
			en.state = parked
			delete(st.failing, r.Sequence)
			st.res.Parked++
			parkedNow++
			st.s.kit.Logger.LogAttrs(ctx, slog.LevelWarn, "relay: parked an event the target refused",
				slog.String("relay", st.s.cfg.Name), slog.Int64("sequence", r.Sequence), slog.String("topic", en.topic),
				slog.Int("attempts", r.Attempts), slog.String("error", msg))
			continue
		}
		st.failing[r.Sequence] = r.Attempts
		st.res.LastError = fmt.Sprintf("sequence %d: %s", r.Sequence, msg)
	}
	return parkedNow, nil
}

// errorText is a refusal as relay_parked keeps it: code, then message,
// cut to maxErrorText bytes on a character boundary.
func errorText(code, message string) string {
	s := code
	if message != "" {
		s += ": " + message
	}
	if len(s) <= maxErrorText {
		return s
	}
	cut := maxErrorText
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut]
}

// commit moves the position over what of the batch is resolved, and drops
// the batch once all of it is.
func (st *stream) commit(ctx context.Context, q store.Querier) error {
	b := st.cur
	if pos := advance(b.from, b.entries); pos > st.position {
		stored, err := st.s.commit(ctx, q, pos)
		if err != nil {
			return err
		}
		st.position = max(pos, stored)
		if err := st.forget(ctx, q); err != nil {
			return err
		}
	}
	if resolved(b.entries) {
		st.res.Batches++
		st.res.MaxBatchMS = max(st.res.MaxBatchMS, st.s.kit.Now().Sub(b.began).Milliseconds())
		st.cur = nil
	}
	return nil
}

// forget deletes the rows of refused events the position has passed
// without parking them: they were sent after all.
func (st *stream) forget(ctx context.Context, q store.Querier) error {
	stale := false
	for seq := range st.failing {
		if seq <= st.position {
			stale = true
			delete(st.failing, seq)
		}
	}
	if !stale {
		return nil
	}
	if _, err := q.Exec(ctx, st.s.sql.forgetRefusals, pgx.NamedArgs{"relay": st.s.cfg.Name, "position": st.position}); err != nil {
		return fmt.Errorf("forget refused events sent since: %w", err)
	}
	return nil
}

// resume fits the batch in hand to the committed position, after the lease
// was taken again (a transient error, or a take-back): what the position
// passed was sent, by this pass or another; a position behind the batch
// (rewound by hand) means reading again. A batch sent but not committed
// stays in hand, for the next step to commit.
func (st *stream) resume() {
	st.ahead = nil
	b := st.cur
	if b == nil {
		return
	}
	if st.position < b.from || st.position >= b.entries[len(b.entries)-1].seq {
		st.cur = nil
		return
	}
	for i := range b.entries {
		if b.entries[i].seq <= st.position && !b.entries[i].state.resolved() {
			b.entries[i].state = sent
		}
	}
}

// stoppedAt is the first event of the batch in hand not resolved, and
// whether the target refused it for itself (rather than failing
// transiently): where the stream stands still.
func (st *stream) stoppedAt() (seq int64, refused, ok bool) {
	if st.cur == nil {
		return 0, false, false
	}
	for i := range st.cur.entries {
		en := &st.cur.entries[i]
		if !en.state.resolved() {
			_, refused = st.failing[en.seq]
			return en.seq, refused || en.bad != "", true
		}
	}
	return 0, false, false
}

// readEvents is read_events after the position: the rows up to, never
// past, the first sequence whose writer may still commit.
func (s *Service) readEvents(ctx context.Context, q store.Querier, after int64, limit int) ([]event, error) {
	rows, err := q.Query(ctx, s.sql.readEvents, pgx.StrictNamedArgs{"after": after, "max": limit})
	if err != nil {
		return nil, fmt.Errorf("read events after %d: %w", after, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (event, error) {
		var e event
		var xid any
		err := r.Scan(&e.Sequence, &xid, &e.Topic, &e.Payload, &e.Headers, &e.RecordedAt, &e.FilledBy,
			&e.AggregateType, &e.AggregateID, &e.EventType)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read events after %d: %w", after, err)
	}
	return out, nil
}

// commit moves the relay's position to position with commit_position,
// which never moves it back: it answers the position stored.
func (s *Service) commit(ctx context.Context, q store.Querier, position int64) (int64, error) {
	var stored int64
	if err := q.QueryRow(ctx, s.sql.commitPosition, pgx.StrictNamedArgs{"name": s.consumer, "position": position}).Scan(&stored); err != nil {
		return 0, fmt.Errorf("commit position %d for %s: %w", position, s.consumer, err)
	}
	return stored, nil
}
