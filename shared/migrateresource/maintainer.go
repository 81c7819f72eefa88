package migrateresource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// Secrets is what the resource asks of Secrets Manager for the maintainer:
// read its secret, and complete it with the endpoint. The SDK's
// *secretsmanager.Client satisfies it.
type Secrets interface {
	pg.SecretsClient
	PutSecretValue(ctx context.Context, in *secretsmanager.PutSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.PutSecretValueOutput, error)
}

// Endpoint is where the owner's login connects; the maintainer's secret
// gets the same, so the functions reach the database the migrations ran on.
type Endpoint struct {
	Host   string
	Port   int
	DBName string
}

// EndpointDB is a DB that says where it connects (functions/migrate's
// pool does); without it a maintainer secret must carry its own host.
type EndpointDB interface {
	Endpoint() Endpoint
}

// roleName is an unquoted PostgreSQL identifier, as the template's
// parameters allow: it is quoted anyway where it reaches SQL.
var roleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// maintainerLogin is the login the functions use: its name, and the
// password to set (none for RDS IAM).
type maintainerLogin struct {
	name     string
	password string
	iam      bool
	secret   pg.RDSSecret
}

// ensureMaintainer sets the functions' login up, as the owner, after the
// migrations: the role (created, or its password set again from the
// secret), its grants (grant_maintainer, which also records it for later
// migrations' regrant_roles), and, for a secret without a host, the
// owner's endpoint written into the secret. It refuses a login that is
// the owner, a member of the owner's role, or a superuser: the functions'
// login must not be able to change the schema.
func (s *Service) ensureMaintainer(ctx context.Context, db DB, res *Result) error {
	m, err := s.maintainerLogin(ctx)
	if err != nil {
		return err
	}
	res.Maintainer = m.name
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if err := guardMaintainer(ctx, tx, m.name, s.cfg.Schema); err != nil {
		return err
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = $1)`, m.name).Scan(&exists); err != nil {
		return err
	}
	ident := pgx.Identifier{m.name}.Sanitize()
	if !exists {
		if _, err := tx.Exec(ctx, "CREATE ROLE "+ident+" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"); err != nil {
			return fmt.Errorf("create the maintainer login %s (the owner needs CREATEROLE): %w", m.name, err)
		}
		res.MaintainerCreated = true
	}
	if m.iam {
		var rdsIAM bool
		if err := tx.QueryRow(ctx, `SELECT to_regrole('rds_iam') IS NOT NULL`).Scan(&rdsIAM); err != nil {
			return err
		}
		if !rdsIAM {
			return fmt.Errorf("MAINTAINER_IAM_USER=%s: the database has no rds_iam role: RDS IAM authentication needs RDS or Aurora PostgreSQL; use a maintainer secret elsewhere", m.name)
		}
		if _, err := tx.Exec(ctx, "GRANT rds_iam TO "+ident); err != nil {
			return fmt.Errorf("grant rds_iam to the maintainer login %s: %w", m.name, err)
		}
	} else {
		// The verifier, not the password, crosses the wire and may reach
		// a statement log.
		verifier, err := pg.SCRAMVerifier(m.password)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "ALTER ROLE "+ident+" WITH LOGIN PASSWORD '"+verifier+"'"); err != nil {
			return fmt.Errorf("set the maintainer login %s's password: %w", m.name, err)
		}
	}
	schema := store.MustSchema(s.cfg.Schema)
	if _, err := tx.Exec(ctx, "SELECT "+schema.Table("grant_maintainer")+"($1::regrole)", m.name); err != nil {
		return fmt.Errorf("grant the maintainer login %s its rights: %w", m.name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if !m.iam && m.secret.Host == "" {
		return s.completeSecret(ctx, db, m)
	}
	return nil
}

// guardMaintainer refuses a maintainer login that could change the
// schema: the owner's own, one the owner's role includes, a superuser.
func guardMaintainer(ctx context.Context, tx pgx.Tx, name, schema string) error {
	var owner string
	var member, super bool
	err := tx.QueryRow(ctx, `
		SELECT n.nspowner::regrole::text,
		       coalesce(pg_catalog.pg_has_role(r.oid, n.nspowner, 'MEMBER'), false),
		       coalesce(r.rolsuper, false)
		FROM pg_catalog.pg_namespace n
		LEFT JOIN pg_catalog.pg_roles r ON r.rolname = $1
		WHERE n.nspname = $2`, name, schema).Scan(&owner, &member, &super)
	switch {
	case err != nil:
		return err
	case name == owner || member:
		return fmt.Errorf("the maintainer login %s is the schema's owner %s or a member of it: the functions must log in as a role of their own, which cannot drop or alter the schema", name, owner)
	case super:
		return fmt.Errorf("the maintainer login %s is a superuser: the functions must log in as a role that cannot drop or alter the schema", name)
	}
	return nil
}

// maintainerLogin reads who the maintainer is: the secret's username and
// password, or the IAM user's name.
func (s *Service) maintainerLogin(ctx context.Context) (maintainerLogin, error) {
	if u := s.cfg.MaintainerIAMUser; u != "" {
		return maintainerLogin{name: u, iam: true}, nil
	}
	secrets, err := s.secrets(ctx)
	if err != nil {
		return maintainerLogin{}, err
	}
	sec, err := pg.FetchSecret(ctx, secrets, s.cfg.MaintainerSecretARN)
	if err != nil {
		return maintainerLogin{}, fmt.Errorf("MAINTAINER_SECRET_ARN: %w", err)
	}
	if !roleName.MatchString(sec.Username) {
		return maintainerLogin{}, fmt.Errorf("MAINTAINER_SECRET_ARN: the secret's username %q is not a plain identifier (letters, digits, _; at most 63)", sec.Username)
	}
	return maintainerLogin{name: sec.Username, password: sec.Password, secret: sec}, nil
}

// completeSecret writes the owner's endpoint into the maintainer's secret
// (the template generates it with username and password only), in the RDS
// shape the functions read.
func (s *Service) completeSecret(ctx context.Context, db DB, m maintainerLogin) error {
	e, ok := db.(EndpointDB)
	if !ok {
		return errors.New("MAINTAINER_SECRET_ARN: the secret names no host, and the owner's endpoint is not known")
	}
	ep := e.Endpoint()
	doc, err := json.Marshal(map[string]any{
		"engine": "postgres", "username": m.name, "password": m.password,
		"host": ep.Host, "port": ep.Port, "dbname": ep.DBName,
	})
	if err != nil {
		return err
	}
	secrets, err := s.secrets(ctx)
	if err != nil {
		return err
	}
	if _, err := secrets.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(s.cfg.MaintainerSecretARN), SecretString: aws.String(string(doc)),
	}); err != nil {
		return fmt.Errorf("MAINTAINER_SECRET_ARN: write the endpoint into the secret: %w", err)
	}
	return nil
}

func (s *Service) secrets(ctx context.Context) (Secrets, error) {
	if s.opts.Secrets == nil {
		return nil, errors.New("MAINTAINER_SECRET_ARN is set but no Secrets Manager client was configured")
	}
	return s.opts.Secrets(ctx)
}

// validMaintainer is Config's rule for the maintainer variables.
func validMaintainer(c Config) (field, value, reason string) {
	switch {
	case c.MaintainerSecretARN != "" && c.MaintainerIAMUser != "":
		return "MaintainerIAMUser", c.MaintainerIAMUser, "set only one of MAINTAINER_SECRET_ARN and MAINTAINER_IAM_USER"
	case c.MaintainerSecretARN != "" && !strings.HasPrefix(c.MaintainerSecretARN, "arn:"):
		return "MaintainerSecretARN", c.MaintainerSecretARN, "must be a Secrets Manager ARN (arn:...)"
	case c.MaintainerIAMUser != "" && !roleName.MatchString(c.MaintainerIAMUser):
		return "MaintainerIAMUser", c.MaintainerIAMUser, "must be a plain identifier (letters, digits, _; at most 63)"
	}
	return "", "", ""
}
