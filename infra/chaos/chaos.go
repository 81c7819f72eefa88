// Package chaos is the reliability suite: writers of every kind, a relay
// and a consumer run against the real functions (their bootstraps under
// aws-lambda-rie, on the template's settings) while faults are injected at
// random — connections killed, locks held, a deadline mid-pass, a database
// restart, hostile rollback reports — half the run through PgBouncer. After
// quiescence it holds the database to the run's own ledger: nothing
// committed lost or overwritten, nothing missing, the consumer's stream
// gap-free, every abandoned sequence filled within the fill's bound, no
// invocation killed by its timeout.
//
// TestChaos runs it (about two minutes; -chaos.duration for longer).
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/sqsreport"
)

// Config is one run.
type Config struct {
	// Root is the repository (template.yaml, functions/, infra/stack).
	Root string
	// AdminURL and PoolerURL reach the stack's server directly and through
	// PgBouncer; Database is created on it afresh.
	AdminURL, PoolerURL, Database string
	// WorkDir receives the bootstraps and the functions' logs.
	WorkDir string
	// Duration is how long the writers and the faults run; Settle the
	// longest wait for quiescence after.
	Duration, Settle time.Duration
	Seed             uint64
}

// Run runs the suite and reports what it found. An error means the run
// itself could not be carried out.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Report, error) {
	s, err := startStack(ctx, cfg.Root, cfg.WorkDir, cfg.AdminURL, cfg.PoolerURL, cfg.Database)
	if s != nil {
		defer s.close(ctx)
	}
	if err != nil {
		return nil, err
	}
	fillCfg, err := config.Load[fill.Config](config.FromMap(s.env("fill", s.directURL, s.tmpl.FillTimeout)))
	if err != nil {
		return nil, err
	}
	sweepStuck, _ := time.ParseDuration(overrides["sweep"]["SWEEP_STUCK_AFTER"])
	fmt.Fprintf(out, "chaos: %s of writers and faults, then up to %s to settle; functions on the template's settings but fill every %s and both sweeps every %s (SWEEP_STUCK_AFTER=%s), the report queue's visibility timeout %s, logs in %s\n",
		cfg.Duration, cfg.Settle, fillEvery, sweepEvery, sweepStuck, reportVisibility, s.logDir)

	admin, err := pgxpool.New(ctx, s.directURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	pc, err := pgxpool.ParseConfig(s.directURL)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	l := newLedger()
	inner, err := sqsreport.NewFromEnvironment(ctx, s.queues.URL, sqsreport.Options{})
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 11))
	honest := &remembering{inner: inner}
	ob, err := outbox.New(pool, outbox.Options{Reporter: honest})
	if err != nil {
		return nil, err
	}
	w := &workload{l: l, ob: ob, pool: pool, url: s.directURL, reporter: honest}
	w.lossPct.Store(10)
	c := &consumer{ob: ob, seen: map[int64]string{}}

	// The functions and the consumer run until the end of the settling;
	// the writers, the hostile reports and the faults for Duration.
	runStart := time.Now()
	pooled := func() bool { return time.Since(runStart) < cfg.Duration/2 }
	bgCtx, stopBackground := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer func() { stopBackground(); bg.Wait() }()
	bg.Go(func() { s.run(bgCtx, pooled) })
	bg.Go(func() { c.run(bgCtx, l) })
	bg.Go(func() { w.relay(bgCtx) })

	workCtx, stopWork := context.WithTimeout(ctx, cfg.Duration)
	defer stopWork()
	var work sync.WaitGroup
	for i := range 3 {
		work.Go(func() { w.libraryWriter(workCtx, i+1, 3) })
	}
	work.Go(func() { w.libraryWriter(workCtx, 4, 40) }) // bigger transactions, bigger gaps
	for i := range 2 {
		work.Go(func() { w.sqlWriter(workCtx, 10+i) })
	}
	work.Go(func() { w.killedWriter(workCtx, admin) })
	work.Go(func() { w.holder(workCtx) })
	h := &hostile{w: w, sqs: s.sqs, queue: s.queues.URL, admin: admin, rng: rand.New(rand.NewPCG(cfg.Seed, 12)), honest: honest}
	work.Go(func() { h.run(workCtx) })
	f := &faults{s: s, l: l, admin: admin, database: cfg.Database, root: cfg.Root, rng: rng}
	work.Go(func() { f.run(workCtx, cfg.Duration*55/100) })
	stopLosses := time.AfterFunc(max(cfg.Duration-10*time.Second, 0), func() { w.lossPct.Store(0) })
	defer stopLosses.Stop()
	work.Wait()
	f.pending.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	// Quiescence: the consumer at the head, no delivery open, the report
	// queue empty (deferred reports come back and settle).
	settled := false
	deadline := time.Now().Add(cfg.Settle)
	for time.Now().Before(deadline) {
		if ok, err := quiet(ctx, admin, s, c); err == nil && ok {
			settled = true
			break
		}
		if err := pass.Sleep(ctx, 500*time.Millisecond); err != nil {
			return nil, err
		}
	}
	stopBackground()
	bg.Wait()
	fmt.Fprintf(out, "chaos: settled %v after %s\n", settled, time.Since(runStart).Round(time.Second))
	return judge(context.WithoutCancel(ctx), admin, s, w, c, fillCfg, sweepStuck, runStart)
}

// quiet says the run has settled.
func quiet(ctx context.Context, q *pgxpool.Pool, s *stack, c *consumer) (bool, error) {
	var head, open int64
	if err := q.QueryRow(ctx, `SELECT outbox.allocation_head(), (SELECT count(*) FROM outbox.deliveries WHERE state IN ('pending', 'delivered'))`).Scan(&head, &open); err != nil {
		return false, err
	}
	depth, err := local.Depth(ctx, s.sqs, s.queues.URL)
	if err != nil {
		return false, err
	}
	return c.position() == head && open == 0 && depth == 0, nil
}

// DefaultConfig is the bounded run make test does, from the local stack's
// settings.
func DefaultConfig(root string) (Config, error) {
	admin, pooler := os.Getenv("DATABASE_URL"), os.Getenv("PGBOUNCER_URL")
	if admin == "" || pooler == "" {
		return Config{}, errors.New("DATABASE_URL and PGBOUNCER_URL must be set (source .local/stack.env)")
	}
	return Config{
		Root: root, AdminURL: admin, PoolerURL: pooler,
		Database: fmt.Sprintf("outboxkeeper_chaos_%d", time.Now().UnixNano()%1e9),
		WorkDir:  filepath.Join(root, ".local", "chaos"),
		Duration: 60 * time.Second, Settle: 60 * time.Second, Seed: uint64(time.Now().UnixNano()),
	}, nil
}
