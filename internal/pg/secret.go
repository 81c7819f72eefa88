package pg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

// SecretsClient is the one Secrets Manager call the pool needs; the SDK's
// *secretsmanager.Client satisfies it, and tests use a small fake.
type SecretsClient interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// RDSSecret is the JSON shape RDS and Secrets Manager's rotation templates
// use for database credentials.
type RDSSecret struct {
	Username string
	Password string
	Host     string
	Port     int
	DBName   string
	Engine   string
}

// defaultDBName is what PostgreSQL itself connects to when no database is
// named; RDS-managed master secrets carry no dbname.
const defaultDBName = "postgres"

// ParseSecret decodes an RDS-shaped secret. Only username and password are
// required: an RDS-managed master-user secret (ManageMasterUserPassword)
// holds nothing else, and the host then comes from DATABASE_HOST (see
// Override). Errors never quote the secret: it holds a password, and init
// errors end up in the logs.
func ParseSecret(raw []byte) (RDSSecret, error) {
	var doc struct {
		Username string          `json:"username"`
		Password string          `json:"password"`
		Host     string          `json:"host"`
		Port     json.RawMessage `json:"port"`
		DBName   string          `json:"dbname"`
		Engine   string          `json:"engine"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&doc); err != nil {
		return RDSSecret{}, errors.New("secret is not a JSON object in the RDS shape (username, password, host, port, dbname, engine)")
	}
	s := RDSSecret{
		Username: doc.Username,
		Password: doc.Password,
		Host:     strings.TrimSpace(doc.Host),
		Port:     5432,
		DBName:   doc.DBName,
		Engine:   doc.Engine,
	}
	var missing []string
	if s.Username == "" {
		missing = append(missing, "username")
	}
	if s.Password == "" {
		missing = append(missing, "password")
	}
	if len(missing) > 0 {
		return RDSSecret{}, fmt.Errorf("secret lacks %s", strings.Join(missing, ", "))
	}
	// Secrets Manager's own rotation templates write port as a number, but
	// hand-made secrets often carry a string: accept both.
	if p := strings.Trim(strings.TrimSpace(string(doc.Port)), `"`); p != "" && p != "null" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return RDSSecret{}, fmt.Errorf("secret port %q is not a TCP port", p)
		}
		s.Port = n
	}
	if s.DBName == "" {
		s.DBName = defaultDBName
	}
	// The same secret shape serves MySQL and others; refuse those early
	// rather than fail later with a protocol error.
	switch strings.ToLower(s.Engine) {
	case "", "postgres", "postgresql", "aurora-postgresql":
	default:
		return RDSSecret{}, fmt.Errorf("secret engine %q is not PostgreSQL", s.Engine)
	}
	return s, nil
}

// Override replaces the secret's host, port and database with those given
// (DATABASE_HOST, DATABASE_PORT, DATABASE_NAME; empty or 0 keeps the
// secret's), and reports a secret that still names no host.
func (s RDSSecret) Override(host string, port int, dbname string) (RDSSecret, error) {
	if host != "" {
		s.Host = host
	}
	if port != 0 {
		s.Port = port
	}
	if dbname != "" {
		s.DBName = dbname
	}
	if s.Host == "" {
		return s, errors.New("secret lacks host (an RDS-managed master-user secret holds only username and password): " +
			"set DATABASE_HOST, the template's DatabaseHost parameter, to the endpoint to dial")
	}
	return s, nil
}

// ConnString renders the secret as a postgres:// URL that requires TLS.
// net/url escapes the user, password and database, so any character in them
// survives the round trip through pgx's parser.
func (s RDSSecret) ConnString() string {
	u := url.URL{
		Scheme: "postgres",
		User:   url.UserPassword(s.Username, s.Password),
		Host:   net.JoinHostPort(s.Host, strconv.Itoa(s.Port)),
		Path:   "/" + s.DBName,
		// require, not verify-full: RDS server certificates chain to the
		// RDS CAs, which are not in the Lambda image's trust store. With
		// DATABASE_CA_PEM or DATABASE_CA_SECRET_ARN the pool verifies
		// against that bundle instead (verifyFull).
		RawQuery: "sslmode=require",
	}
	return u.String()
}

// FetchSecret reads and parses the database secret.
func FetchSecret(ctx context.Context, client SecretsClient, arn string) (RDSSecret, error) {
	raw, err := secretValue(ctx, client, "DATABASE_SECRET_ARN", arn)
	if err != nil {
		return RDSSecret{}, err
	}
	s, err := ParseSecret(raw)
	if err != nil {
		return RDSSecret{}, fmt.Errorf("config: DATABASE_SECRET_ARN: %s: %w", arn, err)
	}
	return s, nil
}

// secretValue reads one secret's current value; variable names the
// setting it came from, for the error.
func secretValue(ctx context.Context, client SecretsClient, variable, arn string) ([]byte, error) {
	out, err := client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil {
		return nil, fmt.Errorf("config: %s: read secret %s: %w", variable, arn, err)
	}
	switch {
	case out.SecretString != nil:
		return []byte(*out.SecretString), nil
	case out.SecretBinary != nil:
		return out.SecretBinary, nil
	}
	return nil, fmt.Errorf("config: %s: secret %s has no value", variable, arn)
}
