package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// invocation is one pass.
type invocation struct {
	s    *Service
	run  *pass.Run
	hold *pass.Holding
	res  *Result
	st   *stream

	head int64
	// resendDue counts the parked events an operator asked to have
	// re-sent, read when the pass took the lease.
	resendDue int64
	// more says the last batch was a whole page: read again at once,
	// without a look first.
	more bool
}

// RunOnce runs one pass; the input says nothing the pass needs. Waiting
// (for the lease, at a refused event, on a target that fails) is a normal
// outcome, and so is a statement that ran out of the budget (TimedOut); an
// error means the database failed for the rest of the budget, or ctx
// ended. The committed position is always one a later pass continues from.
func (s *Service) RunOnce(ctx context.Context, _ json.RawMessage) (*Result, error) {
	run := s.kit.Begin(ctx)
	res := &Result{Relay: s.cfg.Name, Target: s.target.String()}
	p := &invocation{s: s, run: run, hold: s.lease.Hold(run), res: res, st: newStream(s, res)}
	// Transient database errors (a dropped connection, a restart, a
	// failover) are retried every tick while the budget lasts: the
	// committed position is the checkpoint, and the batch in hand is kept.
	err := run.Retry(ctx, pass.RetryPolicy{Every: s.cfg.Tick, Attempts: pass.Unlimited, OnRetry: func(err error) {
		s.kit.Warn(ctx, "retrying after a transient database error", slog.String("error", err.Error()))
	}}, p.attempt)
	return p.res, p.close(ctx, err)
}

// attempt takes the lease and relays while it holds it.
func (p *invocation) attempt(ctx context.Context) error {
	err := p.hold.Keep(ctx, !p.s.cfg.Bounded, p.acquire, p.work)
	if p.hold.Waiting {
		p.res.wait(WaitingLease)
	}
	return err
}

// args are the relay's own arguments of its lease statements.
func (p *invocation) args() pgx.NamedArgs { return pgx.NamedArgs{"relay": p.s.cfg.Name} }

// loaded is what the statement that takes the lease reads.
type loaded struct {
	position        *int64
	watermark, head int64
	resendDue       int64
	failing         []int64
	failingAttempts []int32
}

func (l *loaded) read(row pgx.Row, lease ...any) error {
	return row.Scan(append(lease, &l.position, &l.watermark, &l.head, &l.resendDue, &l.failing, &l.failingAttempts)...)
}

// acquire takes the lease, or (a watching pass) waits to be handed it
// while its budget lasts, and learns where the relay stands.
func (p *invocation) acquire(ctx context.Context) error {
	var l loaded
	err := p.hold.Acquire(ctx, pass.AcquireParams{Watch: !p.s.cfg.Bounded, Ride: p.s.rides.acquire, Args: p.args(), Read: l.read})
	p.res.LeaseWaitMS = p.hold.WaitMS
	if err != nil {
		return err
	}
	p.head = l.head
	if l.position != nil {
		p.st.position = max(p.st.position, *l.position)
	}
	if !p.hold.Held {
		return nil
	}
	p.res.Waiting = nil
	if l.position == nil {
		if err := p.register(ctx, l.watermark); err != nil {
			return err
		}
	}
	p.st.resume()
	p.st.failing = make(map[int64]int, len(l.failing))
	for i, seq := range l.failing {
		p.st.failing[seq] = int(l.failingAttempts[i])
	}
	p.resendDue = l.resendDue
	return nil
}

// register makes the relay a consumer at its first pass, at 0 (earliest)
// or at the fill watermark (latest), before it sends anything: from then
// on prune keeps every event it has not passed.
func (p *invocation) register(ctx context.Context, watermark int64) error {
	start := int64(0)
	if p.s.cfg.Start == StartLatest {
		start = watermark
	}
	stored, err := p.s.commit(ctx, p.run.Q, start)
	if err != nil {
		return fmt.Errorf("register the relay's position: %w", err)
	}
	p.st.position = stored
	return nil
}

// work relays until the budget ends, a successor takes over, or (a
// bounded pass) nothing is left to send now.
func (p *invocation) work(ctx context.Context) error {
	if p.resendDue > 0 {
		if err := p.st.resend(ctx, p.run.Q, p.run.End); err != nil {
			return err
		}
		p.resendDue = 0
	}
	return p.hold.Watch(ctx, pass.Watching{
		Step: p.next,
		Renew: func(ctx context.Context) error {
			return pass.WrapUnlessLost("renew the lease", p.hold.Renew(ctx, p.s.rides.renew, p.args(), nil))
		},
		HandOver: func(ctx context.Context) (bool, error) {
			// The successor carries on from the committed position.
			return p.hold.HandOver(ctx, p.s.rides.handOver, p.args(), nil)
		},
	})
}

// next is one step and what follows it: at once after progress, a tick
// when idle (or the end, bounded), a backoff after a failed send.
func (p *invocation) next(ctx context.Context) (pass.Next, error) {
	out, err := p.step(ctx)
	switch {
	case err != nil || out == progress:
		return pass.Next{}, err
	case out == failed:
		return pass.Next{Wait: backoff(p.s.cfg.Tick, p.st.failures)}, nil
	}
	return pass.Idle(p.s.cfg.Bounded, p.s.cfg.Tick), nil
}

// step is one look at the stream and, when there is something to send,
// one batch. A look is the lease poll with its probe: one statement while
// the relay is idle. After a whole page, or with a batch in hand, there is
// no look: the relay reads (or sends) at once.
func (p *invocation) step(ctx context.Context) (step, error) {
	p.res.Ticks++
	if p.st.cur == nil && !p.more {
		readable, err := p.hold.Look(ctx)
		if err != nil {
			return 0, err
		}
		if !readable {
			return idle, nil
		}
	}
	out, err := p.st.step(ctx, p.run.Q, p.run.End)
	p.more = err == nil && out == progress && p.st.lastFull
	return out, err
}

// close ends the pass: the lease given back (with the head read in the
// same statement), and the result. A statement the budget ended is a
// normal end, named in TimedOut.
func (p *invocation) close(ctx context.Context, err error) error {
	if errors.Is(err, pass.ErrBudget) && !errors.Is(err, pass.ErrNotSent) {
		p.res.wait(WaitingBudget)
	}
	var head *int64
	_, _, err = p.hold.Finish(ctx, err, pass.Rider{Ride: p.s.rides.finish, Args: p.args(), Read: func(row pgx.Row, lease ...any) error {
		return row.Scan(append(lease, &head)...)
	}})
	if head != nil {
		p.head = *head
	}
	p.report()
	p.res.Retries = p.run.Retries
	return p.run.Close(&p.res.Summary, err)
}

// report copies where the stream stands into the result.
func (p *invocation) report() {
	r := p.res
	r.LeaseWaitMS, r.HandedOver, r.TakenBack = p.hold.WaitMS, p.hold.HandedOver, p.hold.TakenBack
	r.Position, r.Head = p.st.position, max(p.head, p.st.position)
	r.Lag = r.Head - r.Position
	r.StoppedAt = nil
	if seq, refused, ok := p.st.stoppedAt(); ok {
		r.StoppedAt = &seq
		switch {
		case r.WaitingFor() == WaitingLease || r.WaitingFor() == WaitingBudget:
		case refused:
			r.wait(WaitingEvent)
		default:
			r.wait(WaitingTarget)
		}
	}
}
