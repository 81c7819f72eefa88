// Command migrate is the deploy-time migration function: it backs the
// template's custom resource, applying the outbox migrations on Create
// and Update with the owner's login (the only function that has it),
// inside the VPC, then setting up the maintainer login every other
// function uses; it does nothing to the database on Delete. Wiring only; the logic is
// shared/migrateresource, the migrations are shared/migrations.
package main

import (
	"context"
	"errors"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/awsenv"
	"github.com/outboxkeeper/outboxkeeper/internal/logging"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/migrateresource"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

func main() {
	logger := logging.Setup()
	env := config.Environment()
	// A configuration error does not end the init here, unlike the other
	// functions: CloudFormation must get an answer (FAILED, naming the
	// variable) to Create and Update, and a Delete must still succeed.
	dbConfig, dbErr := config.LoadDatabase(env)
	cfg, cfgErr := config.Load[migrateresource.Config](env)
	misconfigured := errors.Join(cfgErr, dbErr)
	if misconfigured != nil {
		cfg = migrateresource.Config{}
	}
	// The database is opened per request, and only for Create and Update:
	// no login, secret read or connection happens at init.
	open := func(ctx context.Context) (migrateresource.DB, error) {
		pool, err := pg.NewPool(ctx, dbConfig.Login, pg.Options{ApplicationName: "outboxkeeper-migrate"})
		if err != nil {
			return nil, err
		}
		return explained{pool}, nil
	}
	secrets := func(ctx context.Context) (migrateresource.Secrets, error) {
		c, err := awsenv.Load(ctx)
		if err != nil {
			return nil, err
		}
		return secretsmanager.NewFromConfig(c), nil
	}
	svc, err := migrateresource.New(open, cfg, migrateresource.Options{Options: pass.Options{Logger: logger}, Misconfigured: misconfigured, Secrets: secrets})
	if err != nil {
		logging.InitFailed(logger, "migrate", "build migrate service", err)
	}
	lambda.Start(svc.Handle)
}

// explained is the pool with a server's refusal of TLS explained in the
// Reason CloudFormation shows: the first connection is dialled at Begin.
type explained struct{ *pg.Pool }

func (e explained) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := e.Pool.Begin(ctx)
	return tx, pg.ExplainTLS(err)
}

// Endpoint is where the owner's login connects, for the maintainer's
// secret.
func (e explained) Endpoint() migrateresource.Endpoint {
	c := e.Pool.Config().ConnConfig
	return migrateresource.Endpoint{Host: c.Host, Port: int(c.Port), DBName: c.Database}
}
