package deliver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// statements are the deliver function's, in the deliveries table's file
// with every other statement on it.
type statements struct {
	claim, pendingProbe, oldestPending, settle string
}

func newStatements(schema string) statements {
	return statements{
		claim:         store.DeliveriesSQL.Statement("deliver_claim", schema),
		pendingProbe:  store.DeliveriesSQL.Statement("deliver_pending_probe", schema),
		oldestPending: store.DeliveriesSQL.Statement("deliver_oldest_pending", schema),
		settle:        store.DeliveriesSQL.Statement("deliver_settle", schema),
	}
}

// settleReserve is kept back from the budget's end for a batch's pushes:
// the statement that acks what they delivered must still be sent, or each
// would be pushed again after the sweep's wait.
const settleReserve = 250 * time.Millisecond

// invocation is one pass.
type invocation struct {
	s    *Service
	run  *pass.Run
	hold *pass.Holding
	res  *Result
	// more says the last claim took a whole batch: claim again at once.
	more bool
	// feed pushes what the claims took; one per hold of the lease.
	feed *feed
}

// settled is what one settle statement did.
type settled struct {
	acked, gone, lost int64
	err               error
}

// RunOnce runs one pass; the input says nothing the pass needs. Waiting
// for the lease, failed pushes and a statement that ran out of the budget
// are normal outcomes; an error means the database failed for the rest of
// the budget, or ctx ended.
func (s *Service) RunOnce(ctx context.Context, _ json.RawMessage) (*Result, error) {
	run := s.kit.Begin(ctx)
	res := &Result{Dead: map[string]int64{}}
	p := &invocation{s: s, run: run, hold: s.lease.Hold(run), res: res}
	kctx, cancel := context.WithDeadline(ctx, run.End)
	err := s.pusher.keys.refresh(kctx)
	cancel()
	if err != nil {
		// The keys last read still sign; none read yet leaves webhooks to
		// the sweep until a pass reads them.
		s.kit.Warn(ctx, "the signing keys were not read", slog.String("error", err.Error()))
		res.LastError = err.Error()
	}
	err = run.Retry(ctx, pass.RetryPolicy{Every: s.cfg.Tick, Attempts: pass.Unlimited, OnRetry: func(err error) {
		s.kit.Warn(ctx, "retrying after a transient database error", slog.String("error", err.Error()))
	}}, p.attempt)
	return p.res, p.close(ctx, err)
}

func (p *invocation) attempt(ctx context.Context) error {
	return p.hold.Keep(ctx, !p.s.cfg.Bounded, p.acquire, func(ctx context.Context) error {
		p.feed = newFeed(ctx, p.s.pusher, p.run.End, p.s.cfg.Concurrency, p.s.kit.Now, func(acked, gone []int64) settled {
			// The acks go out whatever ctx does now: pushes that arrived
			// must not be pushed again for want of this one statement.
			a, g, err := p.s.settle(context.WithoutCancel(ctx), p.run.Q, acked, gone)
			return settled{acked: a, gone: g, lost: int64(len(acked)+len(gone)) - a - g, err: err}
		})
		err := p.work(ctx)
		// Whatever ended the work, what was claimed is pushed (or fails at
		// the budget, for the sweep) and settled before the pass goes on.
		p.feed.close()
		if serr := p.count(); err == nil {
			err = serr
		}
		return err
	})
}

// count adds what the feed's pushes and settles came to since the last
// count to the result, and answers a settle's error.
func (p *invocation) count() error {
	t := p.feed.read()
	p.res.Delivered += t.acked
	p.res.Dead[ReasonGone] += t.gone
	p.res.Lost += t.lost
	p.res.PushFailed += t.failed
	if t.lastError != "" {
		p.res.LastError = t.lastError
	}
	return t.err
}

func (p *invocation) acquire(ctx context.Context) error {
	err := p.hold.Acquire(ctx, pass.AcquireParams{Watch: !p.s.cfg.Bounded, Ride: p.s.rides.acquire})
	p.res.LeaseWaitMS = p.hold.WaitMS
	return err
}

// step is what one step came to.
type step int

const (
	idle step = iota
	progress
	// pushing: no claim now, the feed has enough in hand (or, ahead of
	// the pushes, none may be sent).
	pushing
)

// work delivers until the budget ends, a successor takes over, or (a
// bounded pass) nothing is pending.
func (p *invocation) work(ctx context.Context) error {
	return p.hold.Watch(ctx, pass.Watching{
		Step: p.next,
		Renew: func(ctx context.Context) error {
			return pass.WrapUnlessLost("renew the lease", p.hold.Renew(ctx, p.s.rides.renew, nil, nil))
		},
		HandOver: func(ctx context.Context) (bool, error) {
			// What was claimed is pushed and settled before the hand-over:
			// left, it would wait for the sweep.
			p.feed.drain()
			if err := p.count(); err != nil {
				return false, err
			}
			return p.hold.HandOver(ctx, p.s.rides.handOver, nil, nil)
		},
	})
}

// next is one step and what follows it: at once while there is work, a
// tick when idle (or the end, bounded).
func (p *invocation) next(ctx context.Context) (pass.Next, error) {
	out, err := p.step(ctx)
	if err != nil || out != idle {
		return pass.Next{}, err
	}
	return pass.Idle(p.s.cfg.Bounded, p.s.cfg.Tick), nil
}

// step is one look for pending rows (the lease poll with its probe: one
// statement while idle) and, when there are some, one claim fed to the
// pushes. After a whole batch there is no look: the pass claims again as
// soon as the pushes in hand run low. While they do not, the step waits
// for them, at most a tick.
func (p *invocation) step(ctx context.Context) (step, error) {
	if err := p.feed.err(); err != nil {
		return 0, err
	}
	if !p.mayClaim() {
		p.feed.wait(ctx, p.s.cfg.Tick)
		return pushing, nil
	}
	p.res.Ticks++
	if !p.more {
		pending, err := p.hold.Look(ctx)
		if err != nil {
			return 0, err
		}
		if !pending {
			return idle, nil
		}
	}
	n, err := p.batch(ctx)
	p.more = err == nil && n == p.s.cfg.BatchLimit
	if err != nil || n == 0 {
		return idle, err
	}
	return progress, nil
}

// mayClaim says the next claim (or look) goes out now: at once when
// nothing is in hand; ahead of the pushes in hand only after a whole
// batch, when they run low, with no successor waiting, and with time left
// for two more batches like the last (what a claim takes is pushed before
// the pass ends).
func (p *invocation) mayClaim() bool {
	return claimNow(p.feed.load(), p.s.cfg.Concurrency, p.more, p.hold.Successor, p.run.Left())
}

// claimNow is mayClaim's decision. One claim at a time: two at once
// could each take rows of one FIFO group, and the later rows could then
// be pushed first.
func claimNow(l load, concurrency int, more, successor bool, left time.Duration) bool {
	if l.queued+l.inflight == 0 {
		return true
	}
	return more && !successor && l.queued <= lowWater(concurrency, l.calls) && left >= 2*l.last+time.Second
}

// lowWater is how few calls may wait before the next claim goes out: two
// a worker, so its answer is back before they run dry, and at least the
// last claim's, so a claim's round trip overlaps a whole batch of pushes.
// A claimed row therefore waits behind at most two batches.
func lowWater(concurrency, calls int) int { return max(2*concurrency, calls) }

// batch claims one batch and feeds its live deliveries to the pushes, and
// says how many rows the claim took.
func (p *invocation) batch(ctx context.Context) (int, error) {
	start := p.s.kit.Now()
	ds, err := p.s.claim(ctx, p.run.Q, p.s.cfg.BatchLimit)
	if err != nil || len(ds) == 0 {
		return 0, err
	}
	p.res.Batches++
	p.res.Claimed += int64(len(ds))
	live := ds[:0:0]
	for _, d := range ds {
		if d.State == "dead" {
			p.res.Dead[d.DeadReason]++
			continue
		}
		live = append(live, d)
	}
	p.feed.add(start, live)
	return len(ds), nil
}

// claim runs one claim statement.
func (s *Service) claim(ctx context.Context, q pgxQuerier, limit int) ([]delivery, error) {
	rows, err := q.Query(ctx, s.sql.claim, pgx.NamedArgs{"limit": limit})
	if err != nil {
		return nil, fmt.Errorf("claim pending deliveries: %w", err)
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (delivery, error) {
		var d delivery
		err := r.Scan(&d.ID, &d.Recipient, &d.Kind, &d.TenantID, &d.Payload, &d.State, &d.Attempts,
			&d.Redeliveries, &d.CreatedAt, &d.Target, &d.DeadReason)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim pending deliveries: %w", err)
	}
	return ds, nil
}

// settle acks and makes dead in one statement; it answers how many of
// each moved.
func (s *Service) settle(ctx context.Context, q pgxQuerier, acked, gone []int64) (int64, int64, error) {
	var a, g int64
	if err := q.QueryRow(ctx, s.sql.settle, pgx.NamedArgs{"acked": acked, "gone": gone}).Scan(&a, &g); err != nil {
		return 0, 0, fmt.Errorf("ack %d deliveries: %w", len(acked)+len(gone), err)
	}
	return a, g, nil
}

// pgxQuerier is what claim and settle send their statements through.
type pgxQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// close ends the pass: the lease given back, the oldest pending age read,
// and the result.
func (p *invocation) close(ctx context.Context, err error) error {
	fctx, _, err := p.hold.Finish(ctx, err, pass.Rider{Ride: p.s.rides.finish})
	if aerr := p.run.LastStatement(func() error {
		return p.run.Q.QueryRow(fctx, p.s.sql.oldestPending).Scan(&p.res.OldestPendingS)
	}); aerr != nil && err == nil {
		err = p.run.Absorb(aerr)
	}
	r := p.res
	r.Waiting = p.hold.Waiting
	r.LeaseWaitMS, r.HandedOver, r.TakenBack = p.hold.WaitMS, p.hold.HandedOver, p.hold.TakenBack
	r.Retries = p.run.Retries
	return p.run.Close(&r.Summary, err)
}
