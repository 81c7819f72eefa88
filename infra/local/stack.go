package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/rie"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
)

// Options describe one local deployment.
type Options struct {
	// RepoRoot holds go.mod, template.yaml and functions/.
	RepoRoot string
	// AdminURL is the local stack's DATABASE_URL; Database is created on
	// that server (dropped first when Fresh) and migrated for Schema.
	AdminURL, Database string
	Fresh              bool
	Schema             string
	// QueueName names the report queue (and QueueName-dlq).
	QueueName string
	// ScheduleOverride, when set, invokes fill, sweep and prune this often
	// instead of on the template's schedules: a quicker look, not what a
	// deployment does, and never the source of a documented figure.
	ScheduleOverride time.Duration
	// Tuning gives FILL_*, SWEEP_* and COMPENSATE_* values to use when the
	// driver's own environment does not set them; nil runs the template's
	// defaults.
	Tuning map[string]string
	// RelayTarget, when set, runs the relay function too with this
	// RELAY_TARGET (an ARN or a queue URL of the emulators), on the
	// template's schedule, timeout, memory and concurrency and its
	// parameters' defaults (Tuning and the environment may set RELAY_*).
	// Empty runs no relay, as the template deploys none without a
	// RelayTarget.
	RelayTarget string
	// WorkDir receives the bootstraps and the functions' logs.
	WorkDir string
	// Observe is told about every invocation.
	Observe Observer
}

// LocalStackName is the functions' STACK_NAME under the local driver,
// unless its environment sets one.
const LocalStackName = "outboxkeeper-local"

// Stack is the three functions running under rie against a database and
// the report queues.
type Stack struct {
	Options
	Template    Template
	DatabaseURL string
	Region      string
	SQS         *sqs.Client
	Queues      Queues
	// Functions holds one instance of each function (the one `make up`
	// prints); Fillers and Compensators every fill and compensate
	// instance, the first being the one in Functions.
	Functions    map[string]*Function
	Fillers      []*Function
	Compensators []*Function
	// Relays are the relay's instances (its reserved concurrency), when
	// Options.RelayTarget is set; the first is Functions["relay"].
	Relays  []*Function
	Mapping *Mapping
	LogDir  string

	logs []*os.File
}

// Start prepares the database and the queues, builds the bootstraps and
// starts one rie per function. Close undoes what Start did.
func Start(ctx context.Context, opts Options) (s *Stack, err error) {
	s = &Stack{Options: opts, Functions: map[string]*Function{}, LogDir: filepath.Join(opts.WorkDir, "logs")}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.Template, err = ReadTemplate(filepath.Join(opts.RepoRoot, "template.yaml")); err != nil {
		return s, err
	}
	if s.DatabaseURL, err = PrepareDatabase(ctx, opts.AdminURL, opts.Database, opts.Schema, opts.Fresh); err != nil {
		return s, err
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return s, fmt.Errorf("AWS config: %w", err)
	}
	s.Region = awsCfg.Region
	if s.Region == "" {
		return s, errors.New("AWS_REGION is not set (source .local/stack.env)")
	}
	s.SQS = sqs.NewFromConfig(awsCfg)
	if s.Queues, err = CreateQueues(ctx, s.SQS, opts.QueueName, s.Template); err != nil {
		return s, err
	}
	rieBin, err := findRIE()
	if err != nil {
		return s, err
	}
	bootstraps, err := BuildBootstraps(ctx, opts.RepoRoot, filepath.Join(opts.WorkDir, "bin"), s.functions()...)
	if err != nil {
		return s, err
	}
	if err := os.MkdirAll(s.LogDir, 0o755); err != nil {
		return s, err
	}
	for _, fn := range s.functions() {
		// rie serves one invocation at a time, so compensate gets as many
		// instances as the template's MaximumConcurrency lets Lambda run,
		// and the fill as many as its reserved concurrency (two: a watching
		// pass and the next invocation it hands over to).
		instances := 1
		switch fn {
		case "compensate":
			instances = s.Template.MaxConcurrency
		case "fill":
			instances = s.Template.FillConcurrency
		case Relay:
			instances = s.Template.RelayConcurrency
		}
		for i := 1; i <= instances; i++ {
			logName := fn + ".log"
			if i > 1 {
				logName = fmt.Sprintf("%s-%d.log", fn, i)
			}
			out, err := os.Create(filepath.Join(s.LogDir, logName))
			if err != nil {
				return s, err
			}
			s.logs = append(s.logs, out)
			f, err := rie.Start(ctx, rie.Spec{Name: fn, RIE: rieBin, Bootstrap: bootstraps[fn], Env: s.env(fn), Output: out})
			if err != nil {
				return s, err
			}
			if i == 1 {
				s.Functions[fn] = f
			}
			switch fn {
			case "compensate":
				s.Compensators = append(s.Compensators, f)
			case "fill":
				s.Fillers = append(s.Fillers, f)
			case Relay:
				s.Relays = append(s.Relays, f)
			}
		}
	}
	s.Mapping = &Mapping{
		SQS: s.SQS, Queue: s.Queues, Region: s.Region, Functions: s.Compensators,
		BatchSize: s.Template.BatchSize, Window: s.Template.BatchingWindow, Observe: opts.Observe,
	}
	return s, nil
}

// Run plays EventBridge Scheduler for fill, sweep and prune and the event
// source mapping for compensate until ctx ends. Each schedule fires at
// once and then every period, so even the hourly prune runs in a demo.
func (s *Stack) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { Schedule(ctx, s.Fillers, s.Template.FillInput, s.FillEvery(), s.Observe) })
	wg.Go(func() {
		Schedule(ctx, []*Function{s.Functions["sweep"]}, s.Template.SweepInput, s.SweepEvery(), s.Observe)
	})
	wg.Go(func() {
		Schedule(ctx, []*Function{s.Functions["prune"]}, s.Template.PruneInput, s.PruneEvery(), s.Observe)
	})
	if len(s.Relays) > 0 {
		wg.Go(func() { Schedule(ctx, s.Relays, s.Template.RelayInput, s.RelayEvery(), s.Observe) })
	}
	wg.Go(func() { s.Mapping.Run(ctx) })
	wg.Wait()
}

// functions are the functions this deployment runs: the relay too with a
// RelayTarget.
func (s *Stack) functions() []string {
	if s.RelayTarget == "" {
		return Functions
	}
	return append(slices.Clone(Functions), Relay)
}

// RelayEvery is the period Run invokes the relay with: the template's
// schedule unless ScheduleOverride says otherwise.
func (s *Stack) RelayEvery() time.Duration {
	return cmp.Or(s.ScheduleOverride, s.Template.RelaySchedule)
}

// FillEvery, SweepEvery and PruneEvery are the periods Run invokes them with: the
// template's schedules unless ScheduleOverride says otherwise.
func (s *Stack) FillEvery() time.Duration { return cmp.Or(s.ScheduleOverride, s.Template.FillSchedule) }
func (s *Stack) SweepEvery() time.Duration {
	return cmp.Or(s.ScheduleOverride, s.Template.SweepSchedule)
}
func (s *Stack) PruneEvery() time.Duration {
	return cmp.Or(s.ScheduleOverride, s.Template.PruneSchedule)
}

// ScheduleNote says where the schedules come from, for the output of the
// demo and of make up.
func (s *Stack) ScheduleNote() string {
	if s.ScheduleOverride > 0 {
		return fmt.Sprintf("fill, sweep and prune every %s: an override, not the template's schedules (fill %s, sweep %s, prune %s)",
			s.ScheduleOverride, s.Template.FillSchedule, s.Template.SweepSchedule, s.Template.PruneSchedule)
	}
	return fmt.Sprintf("fill every %s, sweep every %s, prune every %s: the template's schedules",
		s.Template.FillSchedule, s.Template.SweepSchedule, s.Template.PruneSchedule)
}

// Close stops every rie it started and closes the logs. Queues and the
// database stay: the caller decides (the demo deletes its queues).
func (s *Stack) Close() {
	var wg sync.WaitGroup
	for _, f := range s.Functions {
		wg.Go(f.Stop)
	}
	for _, f := range slices.Concat(s.Compensators, s.Fillers, s.Relays) {
		wg.Go(f.Stop) // the first is in Functions too; Stop is idempotent
	}
	wg.Wait()
	for _, l := range s.logs {
		l.Close()
	}
}

// env is the function's configuration as the template's Globals and
// function Environment would give it, pointed at the local stack; rie adds
// what Lambda itself sets, and nothing else of the driver's environment.
func (s *Stack) env(fn string) map[string]string {
	timeout, memory := s.Template.FunctionTimeout, s.Template.FunctionMemory
	switch fn {
	case "fill":
		timeout, memory = s.Template.FillTimeout, s.Template.FillMemory
	case Relay:
		timeout, memory = s.Template.RelayTimeout, s.Template.RelayMemory
	}
	env := map[string]string{
		"DATABASE_URL":  s.DatabaseURL,
		"OUTBOX_SCHEMA": s.Schema,
		// The template's timeout, not rie's default: rie enforces it and
		// passes the deadline to the function, as Lambda does.
		"AWS_LAMBDA_FUNCTION_TIMEOUT":     strconv.Itoa(int(timeout.Seconds())),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(memory),
		"AWS_REGION":                      s.Region,
		"AWS_DEFAULT_REGION":              s.Region,
	}
	// The emulators' endpoints and keys, for compensate's and the relay's
	// clients.
	for _, k := range []string{"AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_SNS", "AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_EVENTBRIDGE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	if fn == "compensate" {
		env["COMPENSATE_DLQ_URL"] = s.Queues.DLQURL
	}
	if fn == Relay {
		env["RELAY_TARGET"] = s.RelayTarget
	}
	// What the template sets from AWS::StackName: the Stack dimension of
	// the metrics, here one no deployment would have.
	env["STACK_NAME"] = cmp.Or(os.Getenv("STACK_NAME"), LocalStackName)
	// The tunables this function reads (config.Variables is the list the
	// config package itself reads): what the template sets with its
	// parameters' defaults, unless the driver's environment or the
	// caller's Tuning says otherwise.
	for _, v := range config.Variables() {
		if !slices.Contains(v.UsedBy, fn) || len(v.UsedBy) > 1 || v.Name == "COMPENSATE_DLQ_URL" || v.Name == "RELAY_TARGET" {
			continue
		}
		if val, ok := os.LookupEnv(v.Name); ok {
			env[v.Name] = val
		} else if val, ok := s.Tuning[v.Name]; ok {
			env[v.Name] = val
		} else if val, ok := s.Template.Env[fn][v.Name]; ok {
			env[v.Name] = val
		}
	}
	return env
}

// FunctionEnv is the environment fn runs with.
func (s *Stack) FunctionEnv(fn string) map[string]string { return s.env(fn) }

// findRIE is AWS_LAMBDA_RIE, which infra/stack/up.sh writes to
// .local/stack.env with the pinned emulator it installs; rie.Start checks
// that it runs. No PATH fallback: an unpinned emulator is not the one the
// tests use.
func findRIE() (string, error) {
	if p := os.Getenv("AWS_LAMBDA_RIE"); p != "" {
		return p, nil
	}
	return "", errors.New("AWS_LAMBDA_RIE is not set: run `bash infra/stack/up.sh` and source .local/stack.env (the Makefile targets do)")
}

// Endpoints lists what a developer points an application at.
func (s *Stack) Endpoints() []string {
	lines := []string{
		"DATABASE_URL=" + s.DatabaseURL,
		"OUTBOX_SCHEMA=" + s.Schema,
		"ROLLBACK_QUEUE_URL=" + s.Queues.URL,
		"ROLLBACK_DLQ_URL=" + s.Queues.DLQURL,
	}
	// An application's Reporter needs the emulator's endpoint too: the
	// queue URL's host (sqs.<region>.localhost) does not resolve here, and
	// aws-sdk-go-v2 sends to AWS_ENDPOINT_URL_SQS instead.
	for _, k := range []string{"AWS_ENDPOINT_URL_SQS", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if v := os.Getenv(k); v != "" {
			lines = append(lines, k+"="+v)
		}
	}
	for _, fn := range s.functions() {
		lines = append(lines, fmt.Sprintf("INVOKE_%s=%s", strings.ToUpper(fn), s.Functions[fn].URL))
	}
	return lines
}
