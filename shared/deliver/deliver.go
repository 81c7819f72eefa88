// Package deliver is the deliver function's logic (docs/design.md §6e):
// the pusher of the deliveries table. One pass claims the oldest pending
// deliveries in one statement (deliver_claim: FOR UPDATE SKIP LOCKED,
// DELIVER_BATCH_LIMIT rows, each moved to delivered, or to dead when its
// recipient is unknown or disabled), pushes them to their recipients'
// targets concurrently (DELIVER_CONCURRENCY workers taking calls from one
// pipeline for the whole pass, feed.go), and acks what each target
// accepted, a batch as soon as its last call returns. A push that fails leaves its row delivered: the sweep
// redelivers it, or dead-letters it, exactly as for any lost push.
//
// A recipient is a name; its target is a row of <schema>.recipients: an
// SQS queue, an SNS topic, an EventBridge bus (shared/target's Senders),
// or an HTTPS webhook, signed with HMAC-SHA256 (signing.go) and reached
// only at a public address of an allowed host (webhook.go).
//
// A pass watches like the relay's: a lease named "deliver", a tick of one
// statement while idle, no sleep while batches come back full, and a
// hand-over to the next scheduled invocation. Every statement and every
// push is bounded by the pass budget.
package deliver

import (
	"cmp"
	"crypto/x509"
	"encoding/json"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/outboxkeeper/outboxkeeper/internal/setting"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/deliver/recipients"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Defaults of Config, as the README's configuration table lists them.
const (
	DefaultTick           = 200 * time.Millisecond
	DefaultBatchLimit     = 100
	DefaultConcurrency    = 8
	DefaultWebhookTimeout = 10 * time.Second
	// DefaultPassBudget outlasts the schedule's minute, so a watching pass
	// is still there when the next one comes to take over.
	DefaultPassBudget = 85 * time.Second
)

// LeaseName is the deliver function's lease: one working pass per schema
// at a time (a second one would only claim disjoint rows, never the same).
const LeaseName = "deliver"

// Config tunes the deliver pass. A zero field means its default, applied
// by New.
type Config struct {
	// Schema holds the outbox tables (OUTBOX_SCHEMA). Default "outbox".
	Schema string `env:"OUTBOX_SCHEMA"`
	// Tick is how often an idle pass looks for pending deliveries
	// (DELIVER_TICK, default 200ms).
	Tick time.Duration `env:"DELIVER_TICK"`
	// BatchLimit caps the deliveries one claim takes (DELIVER_BATCH_LIMIT,
	// default 100, at most 1000).
	BatchLimit int `env:"DELIVER_BATCH_LIMIT"`
	// Concurrency is how many pushes may be in flight at once
	// (DELIVER_CONCURRENCY, default 8).
	Concurrency int `env:"DELIVER_CONCURRENCY"`
	// WebhookTimeout bounds one webhook request, the answer's headers
	// included (DELIVER_WEBHOOK_TIMEOUT, default 10s); the pass budget
	// bounds it further.
	WebhookTimeout time.Duration `env:"DELIVER_WEBHOOK_TIMEOUT"`
	// WebhookHosts are the hosts a webhook may name
	// (DELIVER_WEBHOOK_HOSTS): comma-separated, each a host name or
	// *.domain for any name under domain. Empty: no webhook is pushed.
	WebhookHosts string `env:"DELIVER_WEBHOOK_HOSTS"`
	// SigningSecretARN is the Secrets Manager secret whose keys sign every
	// webhook request (DELIVER_SIGNING_SECRET_ARN): required when
	// WebhookHosts is set. See ParseKeys for its value.
	SigningSecretARN string `env:"DELIVER_SIGNING_SECRET_ARN"`
	// CABundle is a PEM file of the certificate authorities webhooks are
	// verified against instead of the system's (DELIVER_CA_BUNDLE): for a
	// private CA or a test's own. Verification is never turned off.
	CABundle string `env:"DELIVER_CA_BUNDLE"`
	// AllowLoopback lets a webhook reach a loopback address
	// (DELIVER_ALLOW_LOOPBACK=true): for tests on one machine only. Every
	// other private, link-local or unspecified address stays refused. The
	// template never sets it.
	AllowLoopback bool `env:"DELIVER_ALLOW_LOOPBACK"`
	// PassBudget bounds one pass (DELIVER_PASS_BUDGET, default 85s); the
	// Lambda deadline minus 2s bounds it further.
	PassBudget time.Duration `env:"DELIVER_PASS_BUDGET"`
	// Bounded ends a pass as soon as nothing is pending
	// (DELIVER_WATCH=false). By default a pass keeps watching until its
	// budget ends.
	Bounded bool `env:"DELIVER_WATCH,not"`
}

// MaxBatch is the largest DELIVER_BATCH_LIMIT: a batch's pushes all run
// inside one pass, and its rows stay delivered until they are acked.
const MaxBatch = 1000

var bounds = []pass.Bound{
	pass.Dur("Tick", "DELIVER_TICK", DefaultTick, pass.Durations(10*time.Millisecond, time.Minute)),
	pass.Int("BatchLimit", "DELIVER_BATCH_LIMIT", DefaultBatchLimit, pass.Ints(1, MaxBatch)),
	pass.Int("Concurrency", "DELIVER_CONCURRENCY", DefaultConcurrency, pass.Ints(1, 256)),
	pass.Dur("WebhookTimeout", "DELIVER_WEBHOOK_TIMEOUT", DefaultWebhookTimeout, pass.Durations(100*time.Millisecond, 5*time.Minute)),
	pass.PassBudget("DELIVER_PASS_BUDGET", DefaultPassBudget),
}

// Bounds are the Config's numeric fields' defaults and accepted values.
func (Config) Bounds() []pass.Bound { return bounds }

// WithDefaults fills in every zero field.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, store.DefaultSchema)
	c.WebhookHosts = strings.TrimSpace(c.WebhookHosts)
	c.SigningSecretARN = strings.TrimSpace(c.SigningSecretARN)
	c.CABundle = strings.TrimSpace(c.CABundle)
	return pass.WithDefaults(c, bounds)
}

// Validate is the one check of a Config, on its defaults.
func (c Config) Validate() error {
	_, _, err := c.WithDefaults().parse()
	return err
}

func (c Config) parse() (recipients.Hosts, *x509.CertPool, error) {
	if err := pass.Validate("deliver", c, bounds); err != nil {
		return recipients.Hosts{}, nil, err
	}
	v := setting.Checker{Pass: "deliver"}
	hosts, err := recipients.ParseHosts(c.WebhookHosts)
	v.Check(err == nil, "WebhookHosts", c.WebhookHosts, errString(err))
	v.Check(c.WebhookHosts == "" || c.SigningSecretARN != "", "SigningSecretARN", c.SigningSecretARN,
		"is required when DELIVER_WEBHOOK_HOSTS is set: every webhook request is signed")
	var pool *x509.CertPool
	if c.CABundle != "" {
		pem, err := os.ReadFile(c.CABundle)
		v.Check(err == nil, "CABundle", c.CABundle, "cannot be read: "+errString(err))
		if err == nil {
			pool = x509.NewCertPool()
			v.Check(pool.AppendCertsFromPEM(pem), "CABundle", c.CABundle, "holds no PEM certificate")
		}
	}
	return hosts, pool, v.Err()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Options are the injectable parts of a Service.
type Options struct {
	pass.Options
	// AWS is the SDK configuration of the targets' clients and Secrets
	// Manager (awsenv.Load on Lambda).
	AWS aws.Config
	// LeaseTTL overrides the lease period.
	LeaseTTL time.Duration
	// Resolver resolves webhook hosts; net.DefaultResolver when nil.
	Resolver recipients.Resolver
}

// Service runs deliver passes for one schema.
type Service struct {
	// Handler's Handle is the Lambda handler: it runs one pass, writes one
	// JSON log line and one EMF line, and returns the Result.
	*pass.Handler[json.RawMessage, *Result, *Result]
	kit    *pass.Kit
	cfg    Config
	lease  *pass.Lease
	rides  rides
	sql    statements
	pusher *pusher
}

type rides struct {
	acquire, renew, handOver, finish pass.Ride
}

// New applies the defaults, validates cfg and builds a Service. db is
// normally the function's pool: every statement is its own transaction.
func New(db pass.DB, cfg Config, opts Options) (*Service, error) {
	kit, cfg, err := pass.Configure("deliver", db, cfg, opts.Options)
	if err != nil {
		return nil, err
	}
	hosts, pool, err := cfg.parse()
	if err != nil {
		return nil, err
	}
	sql := newStatements(cfg.Schema)
	lease := pass.NewLease(pass.LeaseSpec{Schema: cfg.Schema, Name: LeaseName, Probe: sql.pendingProbe, Tick: cfg.Tick, TTL: opts.LeaseTTL})
	s := &Service{
		kit: kit, cfg: cfg, lease: lease, sql: sql,
		rides: rides{
			acquire:  lease.Ride(pass.StepAcquire, ""),
			renew:    lease.Ride(pass.StepRenew, ""),
			handOver: lease.Ride(pass.StepHandOver, ""),
			finish:   lease.Ride(pass.StepFinish, ""),
		},
	}
	s.pusher = newPusher(pusherConfig{
		aws: opts.AWS, schema: cfg.Schema, concurrency: cfg.Concurrency, timeout: cfg.WebhookTimeout,
		policy:    recipients.Policy{Hosts: hosts, AllowLoopback: cfg.AllowLoopback, Resolver: opts.Resolver},
		roots:     pool,
		secretARN: cfg.SigningSecretARN,
		now:       kit.Now,
	})
	s.Handler = pass.Scheduled("deliver", &kit.Options, s.RunOnce)
	return s, nil
}

// Config is the Service's configuration, its defaults applied.
func (s *Service) Config() Config { return s.cfg }

// Lease is the pass's lease, for tests that stop a pass at one of its
// steps.
func (s *Service) Lease() *pass.Lease { return s.lease }
