package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	"github.com/outboxkeeper/outboxkeeper/shared/sqsreport"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/repo"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	relaypkg "github.com/outboxkeeper/outboxkeeper/shared/relay"
)

// demoConfig is the demo's knobs (see main.go for the variables).
type demoConfig struct {
	Duration, Schedule, Drain time.Duration
	Hold, HoldEvery           time.Duration
	Publishers                int
	Database                  string
	WorkDir                   string
	// Summary, when set, is a file the verdict and the latencies are
	// written to as JSON (summary.go).
	Summary string
}

// lossStopsBefore: the relay stops losing acks this long before the
// publishers stop, so the last lost ack is stuck in time for the sweep that
// runs SWEEP_STUCK_AFTER after the end of the run, rather than the one a
// schedule period later.
const lossStopsBefore = 5 * time.Second

// errInterrupted is returned when the context ends (Ctrl-C) mid-run.
var errInterrupted = errors.New("interrupted")

// run sets everything up, runs the workload for cfg.Duration, drains, and
// judges. It returns whether every check passed.
func run(ctx context.Context, cfg demoConfig, out io.Writer, status *local.StatusLine) (bool, error) {
	root, err := repo.Root()
	if err != nil {
		return false, err
	}
	adminURL := os.Getenv("DATABASE_URL")
	if adminURL == "" {
		return false, errors.New("DATABASE_URL is not set: run `bash infra/stack/up.sh` and source .local/stack.env (make demo does both)")
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = filepath.Join(root, ".local", "demo")
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return false, err
	}
	invlog, err := newInvocationLog(filepath.Join(cfg.WorkDir, "invocations.jsonl"))
	if err != nil {
		return false, err
	}
	defer invlog.close()

	fmt.Fprintf(out, "outboxkeeper demo: building the functions and starting them under aws-lambda-rie...\n")
	// A queue per run: a report left from an earlier run would point at
	// sequences of a database that no longer exists. The relay's topic and
	// queue are the run's own too.
	name := fmt.Sprintf("outboxkeeper-demo-%d", time.Now().UnixNano())
	fan, err := newFanout(ctx, name)
	if err != nil {
		return false, err
	}
	defer fan.delete(context.WithoutCancel(ctx))
	stack, err := local.Start(ctx, local.Options{
		RepoRoot: root, AdminURL: adminURL, Database: cfg.Database, Fresh: true,
		Schema: config.DefaultSchema, QueueName: name, RelayTarget: fan.topicARN,
		ScheduleOverride: cfg.Schedule, WorkDir: cfg.WorkDir, Observe: invlog.observe,
	})
	if err != nil {
		return false, err
	}
	defer stack.Close()
	defer stack.Queues.Delete(context.WithoutCancel(ctx), stack.SQS)
	fmt.Fprintf(out, "  database   %s\n  queue      %s\n  functions  fill %s, sweep %s, compensate %s, prune %s\n  logs       %s\n",
		stack.DatabaseURL, stack.Queues.URL, stack.Functions["fill"].URL, stack.Functions["sweep"].URL,
		stack.Functions["compensate"].URL, stack.Functions["prune"].URL, stack.LogDir)
	fmt.Fprintf(out, "  schedule   %s; compensate from SQS (batch %d, window %s, %d at once)\n",
		stack.ScheduleNote(), stack.Template.BatchSize, stack.Template.BatchingWindow, len(stack.Compensators))
	fillCfg, err := config.Load[fill.Config](config.FromMap(stack.FunctionEnv("fill")))
	if err != nil {
		return false, err
	}
	relayCfg, err := config.Load[relaypkg.Config](config.FromMap(stack.FunctionEnv(local.Relay)))
	if err != nil {
		return false, err
	}
	fmt.Fprintf(out, "  settings   the template's (fill: watch %v, grace %s, tick %s, budget %s; %d at once)%s\n",
		!fillCfg.Bounded, fillCfg.Grace, fillCfg.Tick, fillCfg.PassBudget, len(stack.Fillers), overrides())
	fmt.Fprintf(out, "  relay      every %s to %s, fanned out to %s (relay: watch %v, tick %s, group by %s, budget %s; %d at once)\n",
		stack.RelayEvery(), fan.topicARN, fan.queueURL, !relayCfg.Bounded, relayCfg.Tick, relayCfg.GroupBy, relayCfg.PassBudget, len(stack.Relays))
	held := fmt.Sprintf("one transaction held %s every %s", cfg.Hold, cfg.HoldEvery)
	if cfg.Hold == 0 {
		held = "no transaction held open"
	}
	fmt.Fprintf(out, "  workload   %d publishers for %s, %s; then drain up to %s\n\n",
		cfg.Publishers, cfg.Duration, held, cfg.Drain)

	poolCfg, err := pgxpool.ParseConfig(stack.DatabaseURL)
	if err != nil {
		return false, err
	}
	poolCfg.MaxConns = int32(cfg.Publishers + 6)
	poolCfg.ConnConfig.RuntimeParams["application_name"] = "outboxkeeper-demo"
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return false, err
	}
	defer pool.Close()

	l := newLedger()
	sqsReporter, err := sqsreport.NewFromEnvironment(ctx, stack.Queues.URL, sqsreport.Options{})
	if err != nil {
		return false, err
	}
	ob, err := outbox.New(pool, outbox.Options{Schema: stack.Schema, Reporter: countingReporter{inner: sqsReporter, l: l}})
	if err != nil {
		return false, err
	}
	obs := newObserver(pool, store.MustSchema(stack.Schema))

	// The functions, the consumer and the relay run until the end of the
	// drain; the publishers only for cfg.Duration.
	bgCtx, stopBackground := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer func() { stopBackground(); bg.Wait() }()
	bg.Go(func() { stack.Run(bgCtx) })
	cons := newConsumer(ob, l)
	bg.Go(func() { cons.run(bgCtx) })
	rel, err := startDeliverer(ctx, root, cfg.WorkDir, stack, pool, l)
	if err != nil {
		return false, err
	}
	defer rel.close()
	fmt.Fprintf(out, "  deliver    %d instances, recipients %s (an HTTPS webhook here) and %s (%s)\n\n",
		len(rel.fns), recipientWebhook, recipientQueue, rel.queueURL)
	bg.Go(func() { rel.run(bgCtx, stack.FillEvery(), stack.Observe) })
	qc := newQueueConsumer(fan, l)
	bg.Go(func() { qc.run(bgCtx) })

	stop := make(chan struct{})
	var writers sync.WaitGroup
	for i := range cfg.Publishers {
		w := &writer{id: i + 1, ob: ob, pool: pool, l: l, rng: rand.New(rand.NewPCG(uint64(i), 42))}
		writers.Go(func() { w.run(stop) })
	}
	if cfg.Hold > 0 {
		writers.Go(func() { holder(ob, pool, l, cfg.Hold, cfg.HoldEvery, stop) })
	}

	show := func(phase string, t0 time.Time) {
		status.Show(statusLine(ctx, phase, time.Since(t0), l, cons, obs))
	}
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	stopLosses := time.AfterFunc(max(cfg.Duration-lossStopsBefore, 0), func() { rel.lossPct.Store(0) })
	defer stopLosses.Stop()
	interrupted := waitOrTick(ctx, time.After(cfg.Duration), tick.C, func() { show("run", start) })
	close(stop)
	writers.Wait()
	if interrupted {
		status.Done()
		return false, errInterrupted
	}

	// Drain: no new writes, no more lost acks; wait until the consumer has
	// reached the head and every delivery is settled.
	rel.lossPct.Store(0)
	drainStart := time.Now()
	deadline := time.After(cfg.Drain)
	for {
		if settled(ctx, ob, cons, obs) && qc.count() >= int(l.committedN.Load()) {
			show("done", drainStart)
			break
		}
		var timedOut bool
		select {
		case <-ctx.Done():
			status.Done()
			return false, errInterrupted
		case <-deadline:
			timedOut = true
		case <-tick.C:
			show("drain", drainStart)
		}
		if timedOut {
			show("drain timed out", drainStart)
			break
		}
	}
	status.Done()
	stopBackground()
	bg.Wait()

	o, err := gather(context.WithoutCancel(ctx), l, cons, rel, obs, ob, stack, invlog)
	o.delivered = rel.view()
	if err != nil {
		return false, err
	}
	o.relayed, o.committedAt = qc.view(), l.commitTimes()
	o.fill = fillCfg
	fmt.Fprintln(out, "\nverdict")
	ok := local.PrintVerdict(out, o.checks())
	fmt.Fprintln(out, "\nrollback → placeholder latency (placeholder recorded_at − client rollback time)")
	o.latencies(out)
	fmt.Fprintln(out, "\nrollback → consumer past the sequence (the read that took its placeholder − client rollback time)")
	o.consumerLatencies(out)
	fmt.Fprintln(out, "\ncommit → message in the queue (its SentTimestamp, through the relay and SNS − the COMMIT's return to the writer)")
	o.relayLatencies(out)
	if cfg.Summary != "" {
		if err := writeSummary(cfg.Summary, cfg, stack.ScheduleNote(), o, ok); err != nil {
			return false, err
		}
	}
	fmt.Fprintf(out, "\nthe database %s is kept for inspection; function logs are in %s\n", cfg.Database, stack.LogDir)
	return ok, nil
}

// overrides lists the function settings the driver's environment sets
// over the template's, for the output: a figure taken with them is not
// what a deployment gets.
func overrides() string {
	var set []string
	for _, v := range config.Variables() {
		if val, ok := os.LookupEnv(v.Name); ok && (strings.HasPrefix(v.Name, "FILL_") || strings.HasPrefix(v.Name, "SWEEP_") || strings.HasPrefix(v.Name, "COMPENSATE_") || strings.HasPrefix(v.Name, "RELAY_")) {
			set = append(set, v.Name+"="+val)
		}
	}
	if len(set) == 0 {
		return ""
	}
	return ", overridden: " + strings.Join(set, " ")
}

// waitOrTick calls onTick on every tick until done fires (false) or ctx
// ends (true).
func waitOrTick(ctx context.Context, done <-chan time.Time, tick <-chan time.Time, onTick func()) bool {
	for {
		select {
		case <-ctx.Done():
			return true
		case <-done:
			return false
		case <-tick:
			onTick()
		}
	}
}

// settled: the consumer is at the head (so no gap is left) and no delivery
// is open.
func settled(ctx context.Context, ob *outbox.Outbox, c *consumer, obs *observer) bool {
	head, err := ob.Head(ctx)
	if err != nil {
		return false
	}
	d, err := obs.deliveries(ctx)
	if err != nil {
		return false
	}
	return c.view(false).Pos == head && d.Open == 0
}

func statusLine(ctx context.Context, phase string, elapsed time.Duration, l *ledger, c *consumer, obs *observer) string {
	v := c.view(false)
	fill, comp, _ := obs.placeholderCounts(ctx)
	d, _ := obs.deliveries(ctx)
	// Most telling first, so a narrow terminal (where the line is cut)
	// still shows the consumer and the rollbacks.
	return fmt.Sprintf("[%s %2.0fs] consumer %d/%d stall %.1fs | published %d committed %d rolled back %d reported %d unreported | placeholders fill %d compensate %d | deliveries open %d reset %d dead %d",
		phase, elapsed.Seconds(), v.Pos, v.Head, v.Stall.Seconds(), l.published(), l.committedN.Load(),
		l.reportedN.Load(), l.unreportedN.Load(), fill, comp, d.Open, d.Reset, d.Dead)
}

// gather reads everything the verdict needs once the run has stopped.
func gather(ctx context.Context, l *ledger, c *consumer, rel *deliverer, obs *observer, ob *outbox.Outbox, stack *local.Stack, invlog *invocationLog) (outcome, error) {
	var o outcome
	var err error
	o.committed, o.abandoned, o.held, o.errCount, o.errs = l.snapshot()
	o.consumer = c.view(true)
	if o.consumer.Head, err = ob.Head(ctx); err != nil {
		return o, err
	}
	if o.missing, err = obs.missing(ctx, o.consumer.Head); err != nil {
		return o, err
	}
	if o.placeholders, err = obs.placeholders(ctx); err != nil {
		return o, err
	}
	if o.deliveries, err = obs.deliveries(ctx); err != nil {
		return o, err
	}
	if o.ackedIDs, err = obs.ackedIDs(ctx); err != nil {
		return o, err
	}
	o.enqueued, o.lostAcks = l.enqueued.Load(), l.lostAcks.Load()
	o.invocations, o.invokeErrs = invlog.counts()
	if o.queueDepth, err = local.Depth(ctx, stack.SQS, stack.Queues.URL); err != nil {
		return o, err
	}
	if o.dlqDepth, err = local.Depth(ctx, stack.SQS, stack.Queues.DLQURL); err != nil {
		return o, err
	}
	return o, nil
}

// invocationLog writes every invocation as a JSON line and counts them.
type invocationLog struct {
	mu     sync.Mutex
	f      *os.File
	enc    *json.Encoder
	n, bad map[string]int
}

func newInvocationLog(path string) (*invocationLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &invocationLog{f: f, enc: json.NewEncoder(f), n: map[string]int{}, bad: map[string]int{}}, nil
}

func (il *invocationLog) observe(inv local.Invocation) {
	il.mu.Lock()
	defer il.mu.Unlock()
	il.n[inv.Function]++
	if inv.Error != "" {
		il.bad[inv.Function]++
	}
	_ = il.enc.Encode(inv)
}

func (il *invocationLog) counts() (n, bad map[string]int) {
	il.mu.Lock()
	defer il.mu.Unlock()
	return il.n, il.bad
}

func (il *invocationLog) close() { il.f.Close() }
