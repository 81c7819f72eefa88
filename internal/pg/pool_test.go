package pg

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

func TestParseSecretRoundTripsSpecialCharacters(t *testing.T) {
	// Every character that means something in a URL or a keyword/value DSN.
	password := `p@ss:w/o?r#d% 20'"\;=&+$,[]{}ñ`
	raw := `{"username":"app user@x","password":` + jsonQuote(password) +
		`,"host":"db.example.internal","port":6543,"dbname":"out box","engine":"postgres"}`
	s, err := ParseSecret([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := pgxpool.ParseConfig(s.ConnString())
	if err != nil {
		t.Fatalf("pgx cannot parse %q: %v", s.ConnString(), err)
	}
	cc := pc.ConnConfig
	if cc.Password != password || cc.User != "app user@x" || cc.Host != "db.example.internal" ||
		cc.Port != 6543 || cc.Database != "out box" {
		t.Fatalf("round trip: user=%q password=%q host=%q port=%d db=%q", cc.User, cc.Password, cc.Host, cc.Port, cc.Database)
	}
	if cc.TLSConfig == nil || len(cc.Fallbacks) != 0 {
		t.Fatalf("want sslmode=require (TLS, no plain fallback), got tls=%v fallbacks=%d", cc.TLSConfig != nil, len(cc.Fallbacks))
	}
}

func TestParseSecretShapes(t *testing.T) {
	cases := []struct {
		name, raw string
		want      RDSSecret
		err       string
	}{
		{name: "string port, no dbname (RDS-managed master secret)",
			raw:  `{"username":"u","password":"p","host":"h","port":"5433","engine":"aurora-postgresql"}`,
			want: RDSSecret{Username: "u", Password: "p", Host: "h", Port: 5433, DBName: "postgres", Engine: "aurora-postgresql"}},
		{name: "username and password only (RDS-managed master-user secret)", raw: `{"username":"u","password":"p"}`,
			want: RDSSecret{Username: "u", Password: "p", Port: 5432, DBName: "postgres"}},
		{name: "no port", raw: `{"username":"u","password":"p","host":"h"}`,
			want: RDSSecret{Username: "u", Password: "p", Host: "h", Port: 5432, DBName: "postgres"}},
		{name: "mysql", raw: `{"username":"u","password":"p","host":"h","engine":"mysql"}`, err: "not PostgreSQL"},
		{name: "missing fields", raw: `{"host":"h"}`, err: "lacks username, password"},
		{name: "bad port", raw: `{"username":"u","password":"p","host":"h","port":"x"}`, err: "not a TCP port"},
		{name: "not json", raw: `postgres://u:hunter2@h/db`, err: "not a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseSecret([]byte(c.raw))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("want error containing %q, got %v", c.err, err)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("error leaks the secret: %v", err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

type fakeSecrets struct {
	value string
	err   error
	calls int
	asked string
}

func (f *fakeSecrets) GetSecretValue(_ context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	f.calls++
	f.asked = aws.ToString(in.SecretId)
	if f.err != nil {
		return nil, f.err
	}
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(f.value)}, nil
}

const testARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:outbox-AbCdEf"

func TestPoolConfigFromSecret(t *testing.T) {
	fake := &fakeSecrets{value: `{"username":"outbox","password":"s3cr:t@","host":"db.internal","port":5432,"dbname":"app","engine":"postgres"}`}
	pc, err := PoolConfig(context.Background(), Login{SecretARN: testARN}, Options{Secrets: fake, ApplicationName: "outboxkeeper-fill"})
	if err != nil {
		t.Fatal(err)
	}
	if fake.calls != 1 || fake.asked != testARN {
		t.Fatalf("calls=%d asked=%q", fake.calls, fake.asked)
	}
	cc := pc.ConnConfig
	if cc.User != "outbox" || cc.Password != "s3cr:t@" || cc.Database != "app" || cc.TLSConfig == nil {
		t.Fatalf("unexpected config user=%q db=%q tls=%v", cc.User, cc.Database, cc.TLSConfig != nil)
	}
	if cc.RuntimeParams["application_name"] != "outboxkeeper-fill" {
		t.Fatalf("application_name = %q", cc.RuntimeParams["application_name"])
	}
	// The hook logs each new connection in with the secret's login as it
	// is then (re-read after a rotation), never with an IAM token.
	conn := pc.ConnConfig.Copy()
	conn.Password = ""
	if err := pc.BeforeConnect(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	if conn.User != "outbox" || conn.Password != "s3cr:t@" {
		t.Fatalf("BeforeConnect logs in as %q/%q, want the secret's login", conn.User, conn.Password)
	}
}

func TestPoolConfigSecretErrorNamesVariable(t *testing.T) {
	fake := &fakeSecrets{err: errors.New("AccessDeniedException")}
	_, err := PoolConfig(context.Background(), Login{SecretARN: testARN}, Options{Secrets: fake})
	if err == nil || !strings.Contains(err.Error(), "DATABASE_SECRET_ARN") || !strings.Contains(err.Error(), "AccessDenied") {
		t.Fatalf("got %v", err)
	}
}

func staticAWS() *aws.Config {
	return &aws.Config{
		Region:      "eu-west-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""),
	}
}

func TestIAMHookSignsAFreshTokenPerConnection(t *testing.T) {
	db := Login{URL: "postgres://outbox_fill@proxy.proxy-abc.eu-west-1.rds.amazonaws.com:5432/app", IAMAuth: true}
	pc, err := PoolConfig(context.Background(), db, Options{AWS: staticAWS()})
	if err != nil {
		t.Fatal(err)
	}
	if pc.BeforeConnect == nil {
		t.Fatal("IAM mode must install BeforeConnect")
	}
	if pc.ConnConfig.TLSConfig == nil || len(pc.ConnConfig.Fallbacks) != 0 {
		t.Fatal("IAM mode must require TLS with no plain-text fallback")
	}
	// pgxpool hands the hook a copy of ConnConfig per connection.
	cc := pc.ConnConfig.Copy()
	if err := pc.BeforeConnect(context.Background(), cc); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"proxy.proxy-abc.eu-west-1.rds.amazonaws.com:5432?",
		"Action=connect", "DBUser=outbox_fill", "X-Amz-Signature=",
		"X-Amz-Credential=AKIDEXAMPLE%2F", "%2Feu-west-1%2Frds-db%2Faws4_request",
	} {
		if !strings.Contains(cc.Password, want) {
			t.Errorf("token %q lacks %q", cc.Password, want)
		}
	}
	if pc.ConnConfig.Password != "" {
		t.Error("the pool's own config must never hold a token")
	}
}

func TestIAMHookNeedsRegion(t *testing.T) {
	cfg := staticAWS()
	cfg.Region = ""
	pc, err := PoolConfig(context.Background(), Login{URL: "postgres://u@h/db", IAMAuth: true}, Options{AWS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.BeforeConnect(context.Background(), pc.ConnConfig.Copy()); err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
		t.Fatalf("got %v", err)
	}
}

func TestTLSModes(t *testing.T) {
	cases := []struct {
		url      string
		verifies bool // keeps certificate verification
		refused  bool
	}{
		{url: "postgres://u@h/db"}, // no sslmode: pgx's prefer, upgraded
		{url: "postgres://u@h/db?sslmode=prefer"},
		{url: "postgres://u@h/db?sslmode=allow"},
		{url: "postgres://u@h/db?sslmode=require"},
		{url: "postgres://u@h/db?sslmode=verify-full", verifies: true},
		{url: "host=h user=u dbname=db sslmode=verify-ca", verifies: true},
		{url: "postgres://u@h/db?sslmode=disable", refused: true},
	}
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			pc, err := PoolConfig(context.Background(), Login{URL: c.url, IAMAuth: true}, Options{AWS: staticAWS()})
			if c.refused {
				if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
					t.Fatalf("want refusal naming DATABASE_URL, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cc := pc.ConnConfig
			if cc.TLSConfig == nil {
				t.Fatal("no TLS")
			}
			for _, f := range cc.Fallbacks {
				if f.TLSConfig == nil {
					t.Fatal("plain-text fallback left in place")
				}
			}
			// verify-ca skips hostname checks but verifies the chain itself.
			verifies := !cc.TLSConfig.InsecureSkipVerify || cc.TLSConfig.VerifyPeerCertificate != nil
			if verifies != c.verifies {
				t.Fatalf("verification = %v, want %v", verifies, c.verifies)
			}
		})
	}
}

func TestPlainURLIsLeftAlone(t *testing.T) {
	// Local stacks and CI use a plain URL without TLS; only the secret and
	// IAM paths force TLS.
	pc, err := PoolConfig(context.Background(), Login{URL: "postgres://u:p@127.0.0.1:5433/db?sslmode=disable"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if pc.ConnConfig.TLSConfig != nil || pc.BeforeConnect != nil {
		t.Fatal("plain URL path must not change TLS or auth")
	}
}

func jsonQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

// A DATABASE_URL with a password and no sslmode is TLS or nothing, as a
// secret's login is: pgx's default (prefer) would fall back to plain text
// whenever the TLS attempt fails, which anyone on the path can arrange.
// An explicit sslmode is taken as written; without a password, pgx's
// default stays.
func TestPasswordURLWithoutSSLModeRequiresTLS(t *testing.T) {
	cases := []struct {
		url       string
		plainLeft bool // a plain-text attempt remains
	}{
		{url: "postgres://u:p@db.example.com/app"},
		{url: "postgresql://u:p@db.example.com:6543/app?application_name=x"},
		{url: "host=db.example.com user=u password=p dbname=app"},
		{url: "postgres://u:p@db.example.com/app?sslmode=disable", plainLeft: true},
		{url: "postgres://u:p@db.example.com/app?sslmode=prefer", plainLeft: true},
		{url: "host=db.example.com user=u password=p sslmode=allow", plainLeft: true},
		{url: "postgres://u@db.example.com/app", plainLeft: true},
	}
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			pc, err := PoolConfig(context.Background(), Login{URL: c.url}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			cc := pc.ConnConfig
			plain := cc.TLSConfig == nil
			for _, f := range cc.Fallbacks {
				plain = plain || f.TLSConfig == nil
			}
			if plain != c.plainLeft {
				t.Errorf("a plain-text attempt left: %v, want %v", plain, c.plainLeft)
			}
		})
	}
}

// Against the local cluster, which has no TLS: a URL with a password and
// no sslmode does not connect in plain text; the error says how to allow
// it for a local database.
func TestPasswordURLWithoutSSLModeRefusesAServerWithoutTLS(t *testing.T) {
	u, err := url.Parse(testenv.Require(t, "DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "any-password")
	q := u.Query()
	q.Del("sslmode")
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := NewPool(ctx, Login{URL: u.String()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var ssl bool
	err = pool.QueryRow(ctx, `SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)`).Scan(&ssl)
	if err == nil {
		t.Fatalf("connected (ssl %v) to a server without TLS: the password crossed in plain text", ssl)
	}
	if msg := ExplainTLS(err).Error(); !strings.Contains(msg, "server refused TLS") || !strings.Contains(msg, "sslmode=disable") {
		t.Errorf("the error does not say the server refused TLS and how to allow it: %s", msg)
	}
}
