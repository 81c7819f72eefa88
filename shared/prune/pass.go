package prune

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/budget"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// finishAllowance is how long after the budget's end the pass's last
// statement (recording it in prune_state) may take; budget.Margin keeps
// 2s before Lambda's deadline, so it, the log line and the metrics land
// before it.
const finishAllowance = time.Second

// RunOnce is one pass: batches of deliveries and of events, taken in
// turns so a large backlog of one kind never starves the other, until
// both are done or the budget ends; then one statement records the pass.
// A statement the budget ended is a normal end (named in TimedOut, with
// More set); an error means the database failed, or ctx ended. Each batch
// commits on its own, so whatever the pass did stays done.
func (s *Service) RunOnce(ctx context.Context) (*Result, error) {
	start := s.opts.Now()
	end := start.Add(budget.For(ctx, s.cfg.PassBudget, start))
	bounded := &store.Bounded{DB: s.db, Deadline: end, Now: s.opts.Now}
	q := &store.Counting{Q: bounded}
	res := &Result{}

	err := s.work(ctx, q, end, res)
	if errors.Is(err, store.ErrBudget) {
		res.TimedOut, res.More, err = err.Error(), true, nil
	}
	if err == nil {
		// The record gets its own second past the budget: a pass that
		// spent it all is still counted.
		bounded.Deadline = end.Add(finishAllowance)
		if rerr := s.state.record(context.WithoutCancel(ctx), q, res); rerr != nil {
			if errors.Is(rerr, store.ErrBudget) {
				res.TimedOut = rerr.Error()
			} else {
				err = rerr
			}
		}
	}
	res.Statements = q.Count()
	res.DurationMS = s.opts.Now().Sub(start).Milliseconds()
	if err != nil {
		res.Error = err.Error()
	}
	return res, err
}

// work runs the batches.
func (s *Service) work(ctx context.Context, q store.Querier, end time.Time, res *Result) error {
	deliveries := newCursor(prunesDeliveries(s.cfg))
	events := newCursor(s.cfg.EventsAfter != Keep)
	if events.active {
		b, err := s.events.Bound(ctx, q)
		if err != nil {
			return fmt.Errorf("prune: %w", err)
		}
		res.bound(b)
	}
	for deliveries.active || events.active {
		if !s.opts.Now().Before(end) {
			res.More = true
			return nil
		}
		if deliveries.active {
			b, err := s.deliveries.Prune(ctx, q, store.DeliveryPruneParams{Cursor: deliveries.at, AckedAfter: s.cfg.AckedAfter, DeadAfter: s.cfg.DeadAfter, Limit: s.cfg.BatchLimit})
			if err != nil {
				return fmt.Errorf("prune: %w", err)
			}
			res.Batches++
			res.DeletedAcked += b.Acked
			res.DeletedDead += b.Dead
			res.DeletedDeliveries += b.Acked + b.Dead
			deliveries.move(b.Cursor, b.Done)
		}
		if events.active {
			b, err := s.events.Prune(ctx, q, store.EventPruneParams{Cursor: events.at, OlderThan: s.cfg.EventsAfter, Limit: s.cfg.BatchLimit})
			if err != nil {
				return fmt.Errorf("prune: %w", err)
			}
			res.Batches++
			res.DeletedEvents += b.Deleted
			events.move(b.Cursor, b.Done)
		}
	}
	return nil
}

// cursor is where the next batch of one table starts.
type cursor struct {
	at     int64
	active bool // batches of this table remain in this pass
}

func newCursor(active bool) cursor { return cursor{active: active} }

// move takes a batch's answer. A cursor that did not move ends the table
// too: nothing left past it, whatever the batch said.
func (c *cursor) move(to int64, done bool) {
	c.active = !done && to > c.at
	c.at = max(c.at, to)
}

// prunesDeliveries: at least one kind of delivery has a retention.
func prunesDeliveries(c Config) bool { return c.AckedAfter != Keep || c.DeadAfter != Keep }

// Handle is the Lambda handler: one pass per invocation, one JSON log line
// and one EMF line per pass, the Result as the response. The input is
// ignored: an EventBridge scheduled event, a Scheduler Input or {} all
// mean "prune now". Metrics are emitted even for a failed pass: the rows
// it deleted are gone.
func (s *Service) Handle(ctx context.Context, _ json.RawMessage) (*Result, error) {
	res, err := s.RunOnce(ctx)
	level := slog.LevelInfo
	switch {
	case err != nil:
		level = slog.LevelError
	case res.TimedOut != "":
		level = slog.LevelWarn
	}
	s.opts.Logger.LogAttrs(ctx, level, "prune pass", slog.Any("", res))
	if mErr := s.opts.Metrics.Emit(res.Metrics()...); mErr != nil {
		s.opts.Logger.WarnContext(ctx, "prune: emit metrics", slog.String("error", mErr.Error()))
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}
