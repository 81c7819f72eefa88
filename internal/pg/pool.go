// Package pg opens the functions' connection pool, and resolves how it
// authenticates: a plain DATABASE_URL, a Secrets Manager secret
// (DATABASE_SECRET_ARN, re-read once when a rotated password is refused),
// or an RDS IAM token per connection (DATABASE_IAM_AUTH); and how it
// verifies the server: sslmode=verify-full against DATABASE_CA_PEM or
// DATABASE_CA_SECRET_ARN when one is given.
package pg

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/awsenv"
)

// Options shape a pool beyond what the environment says.
type Options struct {
	// ApplicationName shows in pg_stat_activity, so an operator can tell
	// which function holds a connection (and the fill pass can tell its own
	// sessions from the writers it waits for).
	ApplicationName string
	// AWS is the SDK configuration for Secrets Manager and RDS IAM tokens.
	// Nil: loaded with LoadAWS when needed, and only then, so the
	// plain-URL path never touches AWS.
	AWS *aws.Config
	// LoadAWS loads the SDK configuration when AWS is nil. Default
	// awsenv.Load, the Lambda environment's variables (the execution
	// role's credentials, the region, endpoint overrides), which is all a
	// function has; a program run elsewhere (the CLI) passes the SDK's
	// full default chain, config.LoadDefaultConfig.
	LoadAWS func(context.Context) (aws.Config, error)
	// Secrets overrides the Secrets Manager client (tests).
	Secrets SecretsClient
}

// Login says how to reach PostgreSQL: a URL, or a Secrets Manager secret
// (with optional host, port and database overrides), optionally with RDS
// IAM tokens, and the CAs to verify the server with. shared/config reads
// it from the DATABASE_* variables.
type Login struct {
	// URL is a pgx connection string (DATABASE_URL).
	URL string
	// SecretARN names a Secrets Manager secret in the RDS JSON shape
	// (DATABASE_SECRET_ARN); used instead of URL.
	SecretARN string
	// IAMAuth asks for a fresh RDS IAM token per new connection
	// (DATABASE_IAM_AUTH). The host, port, user and database come from URL.
	IAMAuth bool
	// Host, Port and Name say where to connect in secret mode
	// (DATABASE_HOST, DATABASE_PORT, DATABASE_NAME): each one set replaces
	// the secret's host, port or dbname. An RDS-managed master-user secret
	// holds only a username and a password, so then Host is needed; with
	// one that names the instance, Host can point at an RDS Proxy instead.
	Host string
	Port int
	Name string
	// CAPEM is a PEM bundle of the CAs that sign the server's certificate
	// (DATABASE_CA_PEM); CASecretARN a Secrets Manager secret holding one
	// (DATABASE_CA_SECRET_ARN). Either makes every connection
	// sslmode=verify-full against exactly that bundle.
	CAPEM       string
	CASecretARN string
}

// NewPool opens a pool sized for one Lambda execution environment: it runs
// one invocation at a time, and each pass uses one connection at a time, so
// two connections cover a pass plus one spare for a re-dial after a drop.
// The pool lives across invocations of a warm environment. It connects
// lazily: the first query dials.
func NewPool(ctx context.Context, db Login, opts Options) (*Pool, error) {
	pc, login, err := resolve(ctx, db, opts)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	return &Pool{Pool: pool, login: login}, nil
}

// PoolConfig resolves the connection settings without dialling: the secret
// is read here (once, at init), and with IAM auth the returned config signs
// a fresh token in BeforeConnect for every new connection.
func PoolConfig(ctx context.Context, db Login, opts Options) (*pgxpool.Config, error) {
	pc, _, err := resolve(ctx, db, opts)
	return pc, err
}

// resolve is PoolConfig, and in secret mode the login NewPool's Pool
// re-reads when the server refuses it.
func resolve(ctx context.Context, db Login, opts Options) (*pgxpool.Config, *secretLogin, error) {
	secrets := lazySecrets(ctx, opts)
	connString, variable := db.URL, "DATABASE_URL"
	var login *secretLogin
	if db.SecretARN != "" {
		variable = "DATABASE_SECRET_ARN"
		var err error
		if connString, login, err = fromSecret(ctx, db, secrets); err != nil {
			return nil, nil, err
		}
	}
	pc, err := pgxpool.ParseConfig(connString)
	if err != nil {
		// pgx's message can quote the password; name the variable instead.
		return nil, nil, fmt.Errorf("config: %s: not a valid connection string", variable)
	}
	roots, err := caBundle(ctx, db, secrets)
	if err != nil {
		return nil, nil, err
	}
	if mustUseTLS(db, roots != nil, pc.ConnConfig.Password, connString) {
		if err := requireTLS(&pc.ConnConfig.Config); err != nil {
			return nil, nil, fmt.Errorf("config: %s: %w", variable, err)
		}
	}
	if roots != nil {
		verifyFull(&pc.ConnConfig.Config, roots)
	}
	if login != nil {
		// Every new connection logs in with the login as it is then, so
		// one that re-read the secret after a rotation serves the rest.
		pc.BeforeConnect = login.apply
	}
	if db.IAMAuth {
		cfg, err := loadAWS(ctx, opts)
		if err != nil {
			return nil, nil, err
		}
		pc.BeforeConnect = iamToken(cfg)
		// A token is valid for 15 minutes for *opening* a connection; an
		// open connection outlives it, so the lifetime below is unaffected.
	}
	pooled(pc.ConnConfig, connString)
	lambdaSized(pc, opts.ApplicationName)
	return pc, login, nil
}

// lazySecrets is one Secrets Manager client for the login and the CA
// bundle (opts.Secrets when set), made only when one of them needs it.
func lazySecrets(ctx context.Context, opts Options) func() (SecretsClient, error) {
	var client SecretsClient = opts.Secrets
	return func() (SecretsClient, error) {
		if client == nil {
			cfg, err := loadAWS(ctx, opts)
			if err != nil {
				return nil, err
			}
			client = secretsmanager.NewFromConfig(cfg)
		}
		return client, nil
	}
}

// mustUseTLS: a password or a token must not cross the network in clear
// text, and a CA bundle is for verifying a TLS server. A plain URL with a
// password and no sslmode needs it too: pgx's default, prefer, falls back
// to plain text when the TLS attempt fails, so anyone on the path could
// turn TLS off; an explicit sslmode (disable for a local database) is
// taken as written.
func mustUseTLS(db Login, hasRoots bool, password, connString string) bool {
	return db.SecretARN != "" || db.IAMAuth || hasRoots || (password != "" && !sslmodeGiven(connString))
}

// fromSecret reads the login of DATABASE_SECRET_ARN (with the
// DATABASE_HOST/PORT/NAME overrides) into a connection string, and keeps
// it for re-reading after a rotation.
func fromSecret(ctx context.Context, db Login, secrets func() (SecretsClient, error)) (string, *secretLogin, error) {
	c, err := secrets()
	if err != nil {
		return "", nil, err
	}
	s, err := FetchSecret(ctx, c, db.SecretARN)
	if err != nil {
		return "", nil, err
	}
	if s, err = s.Override(db.Host, db.Port, db.Name); err != nil {
		return "", nil, fmt.Errorf("config: DATABASE_SECRET_ARN: %s: %w", db.SecretARN, err)
	}
	return s.ConnString(), &secretLogin{client: c, arn: db.SecretARN, user: s.Username, password: s.Password}, nil
}

// lambdaSized fits the pool to one execution environment, which runs one
// invocation at a time and may be frozen between them.
func lambdaSized(pc *pgxpool.Config, applicationName string) {
	pc.MaxConns = 2
	pc.MinConns = 0
	// A frozen environment's idle sockets may be dropped by a NAT or by RDS
	// Proxy; do not keep them long, and check them before reuse.
	pc.MaxConnIdleTime = 5 * time.Minute
	pc.MaxConnLifetime = 30 * time.Minute
	pc.HealthCheckPeriod = time.Minute
	if applicationName != "" {
		// A startup parameter, not a SET: nothing session-level that would
		// pin an RDS Proxy connection.
		pc.ConnConfig.RuntimeParams["application_name"] = applicationName
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = 5 * time.Second
	}
}

// pooled makes the connection safe behind a transaction pooler (PgBouncer in
// transaction mode, RDS Proxy) without any URL parameter from the user.
// pgx's default caches *named* prepared statements on the connection; behind
// a pooler the next transaction may run on another server connection, where
// the name is unknown ("prepared statement ... does not exist", 26000) or
// already taken ("... already exists", 42P05). QueryExecModeExec sends each
// statement as the unnamed statement — Parse, Bind, Execute in one
// round trip and one Sync — so nothing outlives its transaction: PgBouncer
// (before 1.21's statement tracking, and with it) may hand every transaction
// to another server connection, and RDS Proxy, which pins a session on named
// prepared statements (PREPARE, or the protocol's named Parse), has nothing
// to pin for. The cost: the server parses each statement afresh (a few tens
// of µs for ours, no plan kept across calls), and parameter types come from
// the Go values, so the SQL casts where a type would be ambiguous. A URL that
// names default_query_exec_mode itself is left as it asks.
func pooled(c *pgx.ConnConfig, connString string) {
	if !strings.Contains(connString, "default_query_exec_mode") {
		c.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
}

func loadAWS(ctx context.Context, opts Options) (aws.Config, error) {
	if opts.AWS != nil {
		return *opts.AWS, nil
	}
	load := opts.LoadAWS
	if load == nil {
		load = awsenv.Load
	}
	cfg, err := load(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	return cfg, nil
}

// requireTLS turns pgx's sslmode into "TLS or nothing". pgx expresses
// sslmode as a first attempt plus fallbacks: prefer (also what an absent
// sslmode means) is TLS then plain, allow is plain then TLS. Dropping every
// plain attempt yields require; verify-ca and verify-full have none to drop
// and keep their verification. Only sslmode=disable is left with nothing,
// and is refused rather than silently upgraded.
func requireTLS(c *pgconn.Config) error {
	attempts := append([]*pgconn.FallbackConfig{{Host: c.Host, Port: c.Port, TLSConfig: c.TLSConfig}}, c.Fallbacks...)
	var tls []*pgconn.FallbackConfig
	for _, a := range attempts {
		if a.TLSConfig != nil {
			tls = append(tls, a)
		}
	}
	if len(tls) == 0 {
		return errors.New("sslmode=disable: a database password or IAM token must travel over TLS, and a CA bundle verifies a TLS server; use sslmode=require or stronger")
	}
	c.Host, c.Port, c.TLSConfig = tls[0].Host, tls[0].Port, tls[0].TLSConfig
	c.Fallbacks = tls[1:]
	return nil
}

// sslmodeGiven says whether the connection string, or PGSSLMODE (which
// pgx reads too), sets sslmode: a URL's query parameter or a keyword/value
// string's keyword.
func sslmodeGiven(connString string) bool {
	if os.Getenv("PGSSLMODE") != "" {
		return true
	}
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		return err == nil && u.Query().Has("sslmode")
	}
	return dsnSSLMode.MatchString(connString)
}

// dsnSSLMode finds the sslmode keyword of a keyword/value string.
var dsnSSLMode = regexp.MustCompile(`(^|\s)sslmode\s*=`)

// ExplainTLS adds what to do to a server's refusal of TLS, which
// outboxkeeper asked for: always with a secret, an IAM token or a CA
// bundle, and with a DATABASE_URL that has a password and no sslmode.
func ExplainTLS(err error) error {
	if err == nil || !strings.Contains(err.Error(), "server refused TLS connection") {
		return err
	}
	return fmt.Errorf("%w (the server offers no TLS, and outboxkeeper connects with TLS when the login has a password "+
		"and DATABASE_URL names no sslmode; for a local database without TLS, add sslmode=disable to DATABASE_URL)", err)
}
