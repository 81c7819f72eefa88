package deliver

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

//go:embed deliver.sql
var sqlFile embed.FS

// SQL is deliver.sql.
var SQL = sqltext.MustParse(sqlFile, "deliver.sql")

type statements struct {
	claim, pendingProbe, oldestPending, settle string
}

func newStatements(schema string) statements {
	return statements{
		claim:         SQL.Statement("claim", schema),
		pendingProbe:  SQL.Statement("pending_probe", schema),
		oldestPending: SQL.Statement("oldest_pending", schema),
		settle:        SQL.Statement("settle", schema),
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
	// next is the batch claimed while the last one was pushed, pushed
	// before anything else; lastBatch is how long the last batch took.
	next      []delivery
	lastBatch time.Duration
	// settling is the last batch's settle, still running while the next
	// batch is claimed and pushed.
	settling chan settled
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
		err := p.work(ctx)
		if serr := p.waitSettle(); err == nil {
			err = serr
		}
		return err
	})
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
)

// work delivers until the budget ends, a successor takes over, or (a
// bounded pass) nothing is pending.
func (p *invocation) work(ctx context.Context) error {
	for {
		out, err := p.step(ctx)
		if err != nil {
			return err
		}
		if out == idle && p.s.cfg.Bounded {
			return nil
		}
		if p.hold.RenewDue() {
			if err := p.hold.Renew(ctx, p.s.rides.renew, nil, nil); err != nil {
				return wrapUnlessLost("renew the lease", err)
			}
		}
		if p.next != nil {
			// A batch claimed ahead is pushed before the pass hands over
			// or ends: left, it would wait for the sweep.
			continue
		}
		if p.hold.Successor {
			done, err := p.hold.HandOver(ctx, p.s.rides.handOver, nil, nil)
			p.res.HandedOver, p.res.TakenBack = p.hold.HandedOver, p.hold.TakenBack
			if err != nil || done {
				return err
			}
			continue
		}
		if out == progress {
			if !p.run.TimeLeft() {
				return nil
			}
			continue
		}
		if !p.run.Pause(ctx, p.s.cfg.Tick) {
			return ctx.Err()
		}
	}
}

// step is one look for pending rows (the lease poll with its probe: one
// statement while idle) and, when there are some, one batch. After a whole
// batch there is no look: the pass claims again at once.
func (p *invocation) step(ctx context.Context) (step, error) {
	p.res.Ticks++
	if !p.more && p.next == nil {
		var pending bool
		held, err := p.hold.Poll(ctx, &pending)
		if err != nil {
			return 0, err
		}
		if !held {
			return 0, pass.ErrLeaseLost
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

// batch claims, pushes and settles one batch, and says how many rows the
// claim took.
func (p *invocation) batch(ctx context.Context) (int, error) {
	start := p.s.kit.Now()
	ds := p.next
	p.next = nil
	if ds == nil {
		var err error
		if ds, err = p.s.claim(ctx, p.run.Q, p.s.cfg.BatchLimit); err != nil {
			return 0, err
		}
	}
	if len(ds) == 0 {
		return 0, nil
	}
	defer func() { p.lastBatch = p.s.kit.Now().Sub(start) }()
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
	if len(live) == 0 {
		return len(ds), nil
	}
	ahead := p.claimAhead(ctx, len(ds))
	pctx, cancel := context.WithDeadline(ctx, p.run.End.Add(-settleReserve))
	outs := p.s.pusher.push(pctx, live)
	cancel()
	if ahead != nil {
		r := <-ahead
		if len(r.ds) > 0 {
			p.next = r.ds
		}
		if r.err != nil {
			_ = p.settleAfter(ctx, outs)
			return len(ds), r.err
		}
	}
	return len(ds), p.settleAfter(ctx, outs)
}

// waitSettle waits for the last batch's settle and counts what it did.
func (p *invocation) waitSettle() error {
	if p.settling == nil {
		return nil
	}
	r := <-p.settling
	p.settling = nil
	p.res.Delivered += r.acked
	p.res.Dead[ReasonGone] += r.gone
	p.res.Lost += r.lost
	return r.err
}

// claimed is a claim's answer.
type claimed struct {
	ds  []delivery
	err error
}

// claimAhead claims the next batch while this one is pushed, so the
// database's time and the targets' overlap: only after a whole batch,
// with no successor waiting, and with time left for two more batches
// like the last (what it claims is pushed before the pass ends).
func (p *invocation) claimAhead(ctx context.Context, n int) <-chan claimed {
	if n < p.s.cfg.BatchLimit || p.hold.Successor || p.run.Left() < 2*p.lastBatch+time.Second {
		return nil
	}
	ch := make(chan claimed, 1)
	go func() {
		ds, err := p.s.claim(ctx, p.run.Q, p.s.cfg.BatchLimit)
		ch <- claimed{ds, err}
	}()
	return ch
}

// settleAfter counts a batch's outcomes and settles them: in the
// background, while the next batch is claimed and pushed, once the one
// before is settled (its error, if any, is this one's).
func (p *invocation) settleAfter(ctx context.Context, outs []outcome) error {
	for _, o := range outs {
		if o.result == pushFailed {
			p.res.PushFailed++
			p.res.LastError = o.reason
		}
	}
	if err := p.waitSettle(); err != nil {
		return err
	}
	acked, gone := split(outs)
	if len(acked)+len(gone) == 0 {
		return nil
	}
	p.settling = make(chan settled, 1)
	go func() {
		// The acks go out whatever ctx does now: pushes that arrived must
		// not be pushed again for want of this one statement.
		a, g, err := p.s.settle(context.WithoutCancel(ctx), p.run.Q, acked, gone)
		p.settling <- settled{acked: a, gone: g, lost: int64(len(acked)+len(gone)) - a - g, err: err}
	}()
	return nil
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

func wrapUnlessLost(what string, err error) error {
	if errors.Is(err, pass.ErrLeaseLost) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// close ends the pass: the lease given back, the oldest pending age read,
// and the result.
func (p *invocation) close(ctx context.Context, err error) error {
	err = p.run.Absorb(err)
	fctx := p.run.Finishing(ctx)
	_, ferr := p.hold.Close(fctx, p.s.rides.finish, nil, nil)
	if err == nil {
		err = p.run.Absorb(ferr)
	}
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
