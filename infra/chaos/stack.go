package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/dburl"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/rie"
)

// The functions run with the template's settings but for these, which the
// output lists: a two-minute run needs passes more often than a minute, and
// stuck deliveries that settle in seconds.
var overrides = map[string]map[string]string{
	"sweep": {"SWEEP_STUCK_AFTER": "5s"},
}

const (
	fillEvery  = 20 * time.Second
	sweepEvery = 5 * time.Second
	// shortTimeout is the Lambda timeout of the invocations that play "the
	// deadline falls in the middle of a pass".
	shortTimeout = 5 * time.Second
	// reportVisibility replaces the report queue's visibility timeout
	// (the template's 180 s, six times compensate's timeout): a batch that
	// fails while the database restarts comes back within the settle
	// rather than minutes after it. Still above compensate's 30 s timeout,
	// so no message reappears while a batch holds it.
	reportVisibility = 45 * time.Second
)

// stack is the functions of one run: each under its own aws-lambda-rie, on
// the test database directly or through PgBouncer.
type stack struct {
	tmpl              local.Template
	directURL, pooled string
	sqs               *sqs.Client
	region            string
	queues            local.Queues
	// fill[0] reaches the database directly, fill[1] through PgBouncer;
	// the schedule uses the second in the first half of the run.
	fill      [2]*rie.Function
	fillShort *rie.Function
	sweep     [2]*rie.Function
	comp      []*rie.Function
	mapping   *local.Mapping
	logs      []*os.File
	logDir    string

	invocations, killed, failed atomic.Int64
	// fillStarts are when the schedule invoked the fill.
	fillMu     sync.Mutex
	fillStarts []time.Time

	invMu      sync.Mutex
	byFunction map[string]int
	failures   []string
}

func startStack(ctx context.Context, root, work, adminURL, poolerAdmin, database string) (*stack, error) {
	s := &stack{logDir: filepath.Join(work, "logs"), byFunction: map[string]int{}}
	var err error
	if s.tmpl, err = local.ReadTemplate(filepath.Join(root, "template.yaml")); err != nil {
		return nil, err
	}
	if s.directURL, err = local.PrepareDatabase(ctx, adminURL, database, store.DefaultSchema, true); err != nil {
		return nil, err
	}
	if s.pooled, err = dburl.ForDatabase(poolerAdmin, database); err != nil {
		return nil, err
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	if s.region = awsCfg.Region; s.region == "" {
		return nil, errors.New("AWS_REGION is not set")
	}
	s.sqs = sqs.NewFromConfig(awsCfg)
	queueTmpl := s.tmpl
	queueTmpl.VisibilityTimeout = reportVisibility
	if s.queues, err = local.CreateQueues(ctx, s.sqs, fmt.Sprintf("outboxkeeper-chaos-%d", time.Now().UnixNano()), queueTmpl); err != nil {
		return nil, err
	}
	bins, err := local.BuildBootstraps(ctx, root, filepath.Join(work, "bin"))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.logDir, 0o755); err != nil {
		return nil, err
	}
	rieBin := os.Getenv("AWS_LAMBDA_RIE")
	if rieBin == "" {
		return nil, errors.New("AWS_LAMBDA_RIE is not set (source .local/stack.env)")
	}
	start := func(fn, name, url string, timeout time.Duration) (*rie.Function, error) {
		out, err := os.Create(filepath.Join(s.logDir, name+".log"))
		if err != nil {
			return nil, err
		}
		s.logs = append(s.logs, out)
		return rie.Start(ctx, rie.Spec{Name: fn, RIE: rieBin, Bootstrap: bins[fn], Env: s.env(fn, url, timeout), Output: out})
	}
	for i, url := range []string{s.directURL, s.pooled} {
		via := []string{"direct", "pgbouncer"}[i]
		if s.fill[i], err = start("fill", "fill-"+via, url, s.tmpl.FillTimeout); err != nil {
			return s, err
		}
		if s.sweep[i], err = start("sweep", "sweep-"+via, url, s.tmpl.FunctionTimeout); err != nil {
			return s, err
		}
		c, err := start("compensate", "compensate-"+via, url, s.tmpl.FunctionTimeout)
		if err != nil {
			return s, err
		}
		s.comp = append(s.comp, c)
	}
	if s.fillShort, err = start("fill", "fill-short", s.directURL, shortTimeout); err != nil {
		return s, err
	}
	s.mapping = &local.Mapping{SQS: s.sqs, Queue: s.queues, Region: s.region, Functions: s.comp,
		BatchSize: s.tmpl.BatchSize, Window: s.tmpl.BatchingWindow, Observe: s.observe}
	return s, nil
}

// env is a function's environment: the template's, pointed at url, with
// the chaos overrides.
func (s *stack) env(fn, url string, timeout time.Duration) map[string]string {
	memory := s.tmpl.FunctionMemory
	if fn == "fill" {
		memory = s.tmpl.FillMemory
	}
	env := map[string]string{
		"DATABASE_URL":                    url,
		"OUTBOX_SCHEMA":                   store.DefaultSchema,
		"AWS_LAMBDA_FUNCTION_TIMEOUT":     strconv.Itoa(int(timeout.Seconds())),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(memory),
		"AWS_REGION":                      s.region,
		"AWS_DEFAULT_REGION":              s.region,
	}
	for k, v := range s.tmpl.Env[fn] {
		env[k] = v
	}
	for _, k := range []string{"AWS_ENDPOINT_URL_SQS", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		env[k] = os.Getenv(k)
	}
	if fn == "compensate" {
		env["COMPENSATE_DLQ_URL"] = s.queues.DLQURL
	}
	for k, v := range overrides[fn] {
		env[k] = v
	}
	return env
}

// observe counts invocations, and the ones that failed or were killed by
// their timeout.
func (s *stack) observe(inv local.Invocation) {
	s.invocations.Add(1)
	s.invMu.Lock()
	s.byFunction[inv.Function]++
	if inv.Error != "" && len(s.failures) < 8 {
		s.failures = append(s.failures, inv.Function+": "+inv.Error)
	}
	s.invMu.Unlock()
	if inv.Error == "" {
		return
	}
	s.failed.Add(1)
	if strings.Contains(inv.Error, "Task timed out") {
		s.killed.Add(1)
	}
}

func (s *stack) invoke(ctx context.Context, f *rie.Function, input []byte) {
	start := time.Now()
	out, err := f.Invoke(ctx, input)
	if ctx.Err() != nil {
		return
	}
	inv := local.Invocation{Function: f.Name, Start: start, Duration: time.Since(start)}
	if err != nil {
		inv.Error = err.Error()
	} else if strings.Contains(string(out), "Task timed out") {
		inv.Error = string(out)
	}
	s.observe(inv)
}

// run plays the schedules until ctx ends: the fill every fillEvery, on the
// PgBouncer execution environment while pooled() says so (an invocation
// the other one is still running waits for it, as reserved concurrency
// would have it), both sweeps together every sweepEvery, and the SQS event
// source mapping.
func (s *stack) run(ctx context.Context, pooled func() bool) {
	var wg sync.WaitGroup
	wg.Go(func() { s.mapping.Run(ctx) })
	wg.Go(func() {
		var fills sync.WaitGroup
		defer fills.Wait()
		t := time.NewTicker(fillEvery)
		defer t.Stop()
		for {
			f := s.fill[0]
			if pooled() {
				f = s.fill[1]
			}
			s.fillMu.Lock()
			s.fillStarts = append(s.fillStarts, time.Now())
			s.fillMu.Unlock()
			fills.Go(func() { s.invoke(ctx, f, s.tmpl.FillInput) })
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	wg.Go(func() {
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		for {
			var both sync.WaitGroup
			for _, f := range s.sweep {
				both.Go(func() { s.invoke(ctx, f, s.tmpl.SweepInput) })
			}
			both.Wait()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	wg.Wait()
}

// nextFillAfter waits for the schedule's next fill invocation after t and
// returns when it started; the schedule makes one within fillEvery.
func (s *stack) nextFillAfter(t time.Time) time.Time {
	limit := t.Add(fillEvery + time.Second)
	for time.Now().Before(limit) {
		s.fillMu.Lock()
		for _, at := range s.fillStarts {
			if at.After(t) {
				s.fillMu.Unlock()
				return at
			}
		}
		s.fillMu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
	return limit
}

func (s *stack) close(ctx context.Context) {
	var wg sync.WaitGroup
	for _, f := range append(append(append([]*rie.Function{s.fillShort}, s.fill[:]...), s.sweep[:]...), s.comp...) {
		if f != nil {
			wg.Go(f.Stop)
		}
	}
	wg.Wait()
	for _, l := range s.logs {
		l.Close()
	}
	if s.sqs != nil {
		s.queues.Delete(context.WithoutCancel(ctx), s.sqs)
	}
}
