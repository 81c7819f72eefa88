// Package boot is the part of a function's init that every function does
// the same way: the JSON logger, its configuration from the environment,
// the database pool and the schema version check. A step that fails ends
// the init with one log line naming the step (and, for configuration, the
// variable), so a broken deployment shows at its first cold start.
package boot

import (
	"context"
	"log/slog"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/outboxkeeper/outboxkeeper/internal/awsenv"
	"github.com/outboxkeeper/outboxkeeper/internal/logging"
	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	migrations "github.com/outboxkeeper/outboxkeeper/shared/migrations"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Init is one function's init in progress.
type Init struct {
	// Function names the function in log lines and its connections'
	// application_name ("outboxkeeper-<Function>").
	Function string
	Logger   *slog.Logger
	Env      config.Lookup
}

// Start sets up the logger and reads the process environment.
func Start(function string) *Init {
	return &Init{Function: function, Logger: logging.Setup(), Env: config.Environment()}
}

// Must ends the init when err is set, saying what failed.
func (in *Init) Must(err error, what string) {
	if err != nil {
		logging.InitFailed(in.Logger, in.Function, what, err)
	}
}

// Config loads the function's own configuration; a bad variable ends the
// init naming it.
func Config[T config.PassConfig[T]](in *Init) T {
	cfg, err := config.Load[T](in.Env)
	in.Must(err, "load "+in.Function+" configuration")
	return cfg
}

// Database opens the function's pool and checks the schema version. The
// pool outlives invocations of a warm environment, and the check makes its
// first connection: a database behind this build (or ahead of it, unless
// the newer migrations are marked compatible) fails the init naming both
// versions, before any pass runs. opts.ApplicationName is set here.
func (in *Init) Database(opts pg.Options) *pg.Pool {
	ctx := context.Background()
	db, err := config.LoadDatabase(in.Env)
	in.Must(err, "load database configuration")
	opts.ApplicationName = "outboxkeeper-" + in.Function
	pool, err := pg.NewPool(ctx, db.Login, opts)
	in.Must(err, "open database pool")
	in.Must(pg.ExplainTLS(migrations.Check(ctx, pool, db.Schema)), "check the schema version")
	return pool
}

// Metrics is the function's EMF emitter, its Stack dimension from
// STACK_NAME (the template sets AWS::StackName), so two stacks in one
// account and region keep their figures apart.
func (in *Init) Metrics() *metrics.Emitter {
	stack, err := config.LoadStack(in.Env)
	in.Must(err, "load the stack name")
	return &metrics.Emitter{Function: in.Function, Stack: stack}
}

// PassOptions are the pass's common options: the init's logger and the
// function's metrics.
func (in *Init) PassOptions() pass.Options {
	return pass.Options{Logger: in.Logger, Metrics: in.Metrics()}
}

// Service is a pass's service: its handler, as the pass kit builds it.
type Service interface{ Lambda() any }

// Serve is the whole of a pass function's main: the init, its
// configuration, the service build makes from them, and the Lambda loop
// serving its handler. A failed build ends the init.
func Serve[T config.PassConfig[T]](function string, build func(in *Init, cfg T) (Service, error)) {
	in := Start(function)
	svc, err := build(in, Config[T](in))
	in.Must(err, "build "+function+" service")
	lambda.Start(svc.Lambda())
}

// AWS is the AWS configuration from Lambda's variables (awsenv), which
// include the AWS_ENDPOINT_URL_<SERVICE> overrides the local stack uses to
// point clients at its emulators.
func (in *Init) AWS() aws.Config {
	cfg, err := awsenv.Load(context.Background())
	in.Must(err, "load the AWS configuration")
	return cfg
}
