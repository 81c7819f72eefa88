package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
)

// login is a connection to the outbox's database as the functions make
// it, and what to call it in output.
type login struct {
	pool   *pg.Pool
	schema string
	// target names the database without its password:
	// user@host:port/db and how the login was made.
	target string
}

// schemaOf is --schema when given, else OUTBOX_SCHEMA, else the default.
func schemaOf(e *env, flagValue string) (string, error) {
	if flagValue == "" {
		v := strings.TrimSpace(lookup(e, "OUTBOX_SCHEMA"))
		if v == "" {
			return config.DefaultSchema, nil
		}
		if err := store.ValidSchema(v); err != nil {
			return "", &config.Error{Variable: "OUTBOX_SCHEMA", Value: v, Reason: err.Error()}
		}
		return v, nil
	}
	if err := store.ValidSchema(flagValue); err != nil {
		return "", usagef("--schema %q: %v", flagValue, err)
	}
	return flagValue, nil
}

func lookup(e *env, name string) string {
	v, _ := e.vars(name)
	return v
}

func loadAWS(ctx context.Context) (aws.Config, error) { return awsconfig.LoadDefaultConfig(ctx) }

// connect logs in from the environment, exactly as a function's init
// does (internal/pg: the URL, the secret with its re-read on rotation,
// IAM tokens, the CA bundle). Nothing is dialled until the first
// statement.
// withLogin connects as connect does, runs fn with the login and closes
// it, whatever fn returns.
func withLogin(ctx context.Context, e *env, schemaFlag string, fn func(l *login) error) error {
	l, err := connect(ctx, e, schemaFlag)
	if err != nil {
		return err
	}
	defer l.pool.Close()
	return fn(l)
}

func connect(ctx context.Context, e *env, schemaFlag string) (*login, error) {
	db, err := config.LoadDatabase(e.vars)
	if err != nil {
		return nil, err
	}
	schema, err := schemaOf(e, schemaFlag)
	if err != nil {
		return nil, err
	}
	// The SDK's full default chain (profiles, SSO, ...): the CLI runs on a
	// laptop or a CI runner, not on Lambda.
	pool, err := pg.NewPool(ctx, db.Login, pg.Options{ApplicationName: "outboxkeeper-cli", LoadAWS: loadAWS})
	if err != nil {
		return nil, err
	}
	cc := pool.Config().ConnConfig
	how := "DATABASE_URL"
	switch {
	case db.SecretARN != "":
		how = "secret " + db.SecretARN
	case db.IAMAuth:
		how = "RDS IAM token"
	}
	target := fmt.Sprintf("%s@%s/%s (%s)", cc.User, net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), cc.Database, how)
	return &login{pool: pool, schema: schema, target: target}, nil
}
