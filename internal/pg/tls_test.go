package pg

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testcluster"
)

func TestCABundleMakesEveryAttemptVerifyFull(t *testing.T) {
	ca := testcluster.NewCA(t, "unit CA")
	wantRoots := x509.NewCertPool()
	wantRoots.AppendCertsFromPEM(ca.PEM)
	for _, url := range []string{
		"postgres://u@db.internal/app",                                // prefer, upgraded
		"postgres://u@db.internal/app?sslmode=require",                // the floor, raised
		"postgres://u@db.internal,db2.internal/app?sslmode=verify-ca", // two hosts
	} {
		t.Run(url, func(t *testing.T) {
			pc, err := PoolConfig(context.Background(), Login{URL: url, CAPEM: string(ca.PEM)}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			cc := pc.ConnConfig
			attempts := map[string]*tls.Config{cc.Host: cc.TLSConfig}
			for _, f := range cc.Fallbacks {
				attempts[f.Host] = f.TLSConfig
			}
			for host, c := range attempts {
				if c == nil {
					t.Errorf("%s: an attempt without TLS", host)
					continue
				}
				if c.InsecureSkipVerify {
					t.Errorf("%s: verification skipped", host)
				}
				if c.RootCAs == nil || !c.RootCAs.Equal(wantRoots) {
					t.Errorf("%s: not verified against the bundle", host)
				}
				if c.ServerName != host {
					t.Errorf("%s: checks the name %q, want the host dialled", host, c.ServerName)
				}
			}
		})
	}
}

func TestCABundleRefusesDisable(t *testing.T) {
	ca := testcluster.NewCA(t, "unit CA")
	_, err := PoolConfig(context.Background(), Login{URL: "postgres://u@h/db?sslmode=disable", CAPEM: string(ca.PEM)}, Options{})
	if err == nil || !strings.Contains(err.Error(), "sslmode=disable") {
		t.Fatalf("got %v, want sslmode=disable refused", err)
	}
}

func TestCABundleMustHoldACertificate(t *testing.T) {
	_, err := PoolConfig(context.Background(), Login{URL: "postgres://u@h/db", CAPEM: "not a certificate"}, Options{})
	if err == nil || !strings.Contains(err.Error(), "DATABASE_CA_PEM") {
		t.Fatalf("got %v, want an error naming DATABASE_CA_PEM", err)
	}
}

// A PEM passed through an environment variable or a template parameter
// often has its line breaks written as \n.
func TestCABundleWithEscapedLineBreaks(t *testing.T) {
	ca := testcluster.NewCA(t, "unit CA")
	flat := strings.ReplaceAll(string(ca.PEM), "\n", `\n`)
	if _, err := parseCABundle([]byte(flat)); err != nil {
		t.Fatal(err)
	}
}

func TestCABundleFromASecret(t *testing.T) {
	ca := testcluster.NewCA(t, "unit CA")
	fake := &fakeSecrets{value: string(ca.PEM)}
	const caARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:rds-ca-XyZ123"
	pc, err := PoolConfig(context.Background(), Login{URL: "postgres://u@h/db?sslmode=require", IAMAuth: true, CASecretARN: caARN}, Options{Secrets: fake, AWS: staticAWS()})
	if err != nil {
		t.Fatal(err)
	}
	if fake.asked != caARN {
		t.Errorf("read secret %q, want the CA's %q", fake.asked, caARN)
	}
	if pc.ConnConfig.TLSConfig == nil || pc.ConnConfig.TLSConfig.RootCAs == nil {
		t.Error("the CA from the secret is not the bundle verified against")
	}
}

// Against a server of the test's own with ssl=on: verify-full with the CA
// that signed its certificate connects, with another CA it does not, and
// neither ever falls back to plain text (the server refuses it).
func TestVerifyFullAgainstARealServer(t *testing.T) {
	t.Parallel()
	right := testcluster.NewCA(t, "the database's CA")
	wrong := testcluster.NewCA(t, "some other CA")
	c := testcluster.Start(t, testcluster.Options{TLS: right.Issue(t, "localhost", "127.0.0.1")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connect := func(ca []byte, host string) error {
		url := strings.Replace(c.URL("postgres", c.Password, "postgres", "sslmode=require"), "127.0.0.1", host, 1)
		pc, err := PoolConfig(ctx, Login{URL: url, CAPEM: string(ca)}, Options{})
		if err != nil {
			return err
		}
		conn, err := pgx.ConnectConfig(ctx, pc.ConnConfig)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		var ssl bool
		if err := conn.QueryRow(ctx, `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl); err != nil || !ssl {
			return errors.New("connected without TLS")
		}
		return nil
	}
	if err := connect(right.PEM, "127.0.0.1"); err != nil {
		t.Errorf("verify-full with the right CA: %v", err)
	}
	if err := connect(right.PEM, "localhost"); err != nil {
		t.Errorf("verify-full with the right CA, by name: %v", err)
	}
	var unknown x509.UnknownAuthorityError
	if err := connect(wrong.PEM, "127.0.0.1"); !errors.As(err, &unknown) {
		t.Errorf("verify-full with the wrong CA: %v, want x509: certificate signed by unknown authority", err)
	}
	// The right CA, but a certificate that does not name the host dialled.
	other := testcluster.Start(t, testcluster.Options{TLS: right.Issue(t, "db.example.internal")})
	url := other.URL("postgres", other.Password, "postgres", "")
	pc, err := PoolConfig(ctx, Login{URL: url, CAPEM: string(right.PEM)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wrongHost x509.HostnameError
	if conn, err := pgx.ConnectConfig(ctx, pc.ConnConfig); !errors.As(err, &wrongHost) {
		if err == nil {
			conn.Close(ctx)
		}
		t.Errorf("verify-full against a certificate for another host: %v, want x509: certificate is not valid for 127.0.0.1", err)
	}
}

// TLS is required whenever a secret, a token or a password could cross the
// network, and whenever a CA bundle is given; only an explicit sslmode on a
// plain URL is taken as written.
func TestMustUseTLSWheneverACredentialCouldCrossInClearText(t *testing.T) {
	for _, c := range []struct {
		name       string
		db         Login
		roots      bool
		password   string
		connString string
		want       bool
	}{
		{"secret", Login{SecretARN: "arn"}, false, "", "", true},
		{"IAM token", Login{IAMAuth: true}, false, "", "postgres://u@h/db?sslmode=disable", true},
		{"CA bundle", Login{}, true, "", "postgres://u@h/db?sslmode=disable", true},
		{"password, no sslmode", Login{}, false, "pw", "postgres://u:pw@h/db", true},
		{"password, sslmode given", Login{}, false, "pw", "postgres://u:pw@h/db?sslmode=disable", false},
		{"no password", Login{}, false, "", "postgres://u@h/db", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := mustUseTLS(c.db, c.roots, c.password, c.connString); got != c.want {
				t.Errorf("mustUseTLS = %v, want %v", got, c.want)
			}
		})
	}
}
