package pass

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Next is what a watching pass does after a step.
type Next struct {
	// Wait is the pause before the next step: 0 at once (while the budget
	// lasts), negative to end the pass once the lease is seen to.
	Wait time.Duration
	// Done ends the pass at once: a bounded pass that has caught up. The
	// finish records the state, so there is nothing to renew first.
	Done bool
	// Save renews the lease now, due or not: the pass has state to record.
	Save bool
}

// Idle is what follows a step that found nothing to do: the end of a
// bounded pass, else a tick's pause before looking again.
func Idle(bounded bool, tick time.Duration) Next {
	if bounded {
		return Next{Done: true}
	}
	return Next{Wait: tick}
}

// Watching is what the watching loop asks of a pass: its step, and the
// renewal and hand-over its state rides on.
type Watching struct {
	Step func(ctx context.Context) (Next, error)
	// Renew renews the lease (Holding.Renew with the pass's state),
	// saying what failed unless it is ErrLeaseLost (WrapUnlessLost).
	Renew func(ctx context.Context) error
	// HandOver gives the lease to a waiting successor (Holding.HandOver
	// with the pass's state, after whatever must be settled first).
	HandOver func(ctx context.Context) (done bool, err error)
}

// Watch runs steps until the budget ends, a successor takes over, or a
// step says Done. The lease is renewed between steps when due and handed
// over as soon as a successor waits, so no step runs on a lease another
// pass may be taking.
func (h *Holding) Watch(ctx context.Context, w Watching) error {
	for {
		next, err := w.Step(ctx)
		if err != nil || next.Done {
			return err
		}
		if next.Save || h.RenewDue() {
			if err := w.Renew(ctx); err != nil {
				return err
			}
		}
		if h.Successor {
			// The next invocation is here: it carries on from the state
			// the hand-over writes, within a poll.
			done, err := w.HandOver(ctx)
			if err != nil || done {
				return err
			}
			continue
		}
		switch {
		case next.Wait < 0:
			return nil
		case next.Wait == 0:
			if !h.run.TimeLeft() {
				return nil
			}
			continue
		}
		if !h.run.Pause(ctx, next.Wait) {
			return ctx.Err()
		}
	}
}

// WrapUnlessLost says what failed, leaving ErrLeaseLost as it is for Keep
// to match.
func WrapUnlessLost(what string, err error) error {
	if err == nil || errors.Is(err, ErrLeaseLost) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}
