// Package migrateresource is the logic of functions/migrate: the
// CloudFormation custom resource that applies the outbox migrations at
// deploy time, with the functions' own login, inside their VPC, before the
// other functions are created (docs/design.md §11).
//
// Create and Update apply the embedded migrations (shared/migrations, one
// transaction, a no-op when already applied); Delete changes nothing in
// the database and does not even connect to it, so deleting a stack, or
// rolling back a failed Create, works whatever state the database is in.
// Every request is answered by a PUT of the response CloudFormation
// expects to the request's pre-signed ResponseURL: SUCCESS, or FAILED with
// the database's error as the Reason, which fails the deployment and shows
// in the stack's events.
package migrateresource

import (
	"cmp"
	"context"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/setting"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Config is the resource's configuration. A zero field means its default.
type Config struct {
	// Schema is the outbox schema to migrate (OUTBOX_SCHEMA, default
	// "outbox").
	Schema string `env:"OUTBOX_SCHEMA"`
	// MaintainerSecretARN names the functions' login (MAINTAINER_SECRET_ARN):
	// a Secrets Manager secret with its username and password, which the
	// template generates. After the migrations the resource creates the
	// role (or sets its password again) and grants it grant_maintainer,
	// and writes the owner's host, port and dbname into the secret when it
	// has none. Empty with MaintainerIAMUser empty: no maintainer is set up
	// (the functions use whatever login they are given).
	MaintainerSecretARN string `env:"MAINTAINER_SECRET_ARN"`
	// MaintainerIAMUser is the functions' login for RDS IAM authentication
	// (MAINTAINER_IAM_USER): created without a password, granted rds_iam
	// and grant_maintainer.
	MaintainerIAMUser string `env:"MAINTAINER_IAM_USER"`
}

// Bounds, WithDefaults and Validate are the kit's rules for a Config
// without numeric fields: the schema's default and its check, whose
// *setting.Error names the field.
func (Config) Bounds() []pass.Bound   { return nil }
func (c Config) WithDefaults() Config { return pass.WithDefaults(c, nil) }
func (c Config) Validate() error {
	if err := pass.Validate("migrate", c, nil); err != nil {
		return err
	}
	if field, value, reason := validMaintainer(c); field != "" {
		return &setting.Error{Pass: "migrate", Field: field, Value: value, Reason: reason}
	}
	return nil
}

// DB is what the migrations run on: a pool that hands out the one
// connection their transaction needs.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Close()
}

// Opener logs in to the database. It is called for Create and Update
// only, and the DB it returns is closed when the request is answered.
type Opener func(ctx context.Context) (DB, error)

// Options are the injectable parts of a Service: the clock and the logger
// (the resource emits no metrics).
type Options struct {
	pass.Options
	// Misconfigured is the error loading the function's configuration
	// failed with, if it did. The function does not fail its init for it,
	// as the other functions do: CloudFormation would then get no answer
	// and wait for the resource's ServiceTimeout, and a stack's Delete
	// would hang on it. Create and Update fail with it as their Reason
	// instead, naming the variable; Delete needs no configuration.
	Misconfigured error
	// HTTP sends the response. Default: a client with a 10 s timeout per
	// attempt.
	HTTP *http.Client
	// Secrets makes the Secrets Manager client for MaintainerSecretARN,
	// called only when the maintainer is set up from a secret.
	Secrets func(ctx context.Context) (Secrets, error)
}

// Service answers the custom resource's requests.
type Service struct {
	open   Opener
	cfg    Config
	opts   Options
	handle *pass.Handler[cfn.Event, *Result, struct{}]
}

// New applies the defaults and validates cfg.
func New(open Opener, cfg Config, opts Options) (*Service, error) {
	if open == nil {
		return nil, &setting.Error{Pass: "migrate", Field: "open", Value: nil, Reason: "must not be nil"}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts.HTTP = cmp.Or(opts.HTTP, &http.Client{Timeout: 10 * time.Second})
	opts.Options = opts.Options.WithDefaults("migrate")
	opts.Metrics = nil
	s := &Service{open: open, cfg: cfg.WithDefaults(), opts: opts}
	s.handle = pass.NewHandler("migrate", &s.opts.Options, s.RunOnce,
		func(_ *Result, err error) (struct{}, error) { return struct{}{}, err }).
		WithMessage(func(r *Result) string { return "migrate " + r.RequestType })
	return s, nil
}
