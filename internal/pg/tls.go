package pg

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// caBundle returns the CAs of DATABASE_CA_PEM or DATABASE_CA_SECRET_ARN,
// nil when neither is set. secrets is called only for the secret.
func caBundle(ctx context.Context, db Login, secrets func() (SecretsClient, error)) (*x509.CertPool, error) {
	variable, pem := "DATABASE_CA_PEM", []byte(db.CAPEM)
	switch {
	case db.CASecretARN != "":
		variable = "DATABASE_CA_SECRET_ARN"
		client, err := secrets()
		if err != nil {
			return nil, err
		}
		if pem, err = secretValue(ctx, client, variable, db.CASecretARN); err != nil {
			return nil, err
		}
	case db.CAPEM == "":
		return nil, nil
	}
	roots, err := parseCABundle(pem)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", variable, err)
	}
	return roots, nil
}

// parseCABundle reads PEM certificates. An environment variable or a
// template parameter often carries a PEM with its line breaks written as
// the two characters `\n`; those are taken for line breaks.
func parseCABundle(pem []byte) (*x509.CertPool, error) {
	text := strings.ReplaceAll(string(pem), `\n`, "\n")
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(text)) {
		return nil, errors.New("no PEM certificate in it (want one or more -----BEGIN CERTIFICATE----- blocks, such as the RDS regional bundle)")
	}
	return roots, nil
}

// verifyFull makes every connection attempt of c sslmode=verify-full
// against roots: the server's chain must lead to one of them and its
// certificate must name the host dialled. The system trust store is not
// consulted: it has no RDS CA, and a bundle the user names is the one
// they mean. c must already be TLS only (requireTLS).
func verifyFull(c *pgconn.Config, roots *x509.CertPool) {
	c.TLSConfig = verifying(c.TLSConfig, c.Host, roots)
	for _, f := range c.Fallbacks {
		f.TLSConfig = verifying(f.TLSConfig, f.Host, roots)
	}
}

func verifying(base *tls.Config, host string, roots *x509.CertPool) *tls.Config {
	var t *tls.Config
	if base != nil {
		// Keeps what pgx derived from the URL (a client certificate, ALPN
		// for direct negotiation); only the verification changes.
		t = base.Clone()
	} else {
		t = &tls.Config{}
	}
	t.RootCAs = roots
	t.ServerName = host
	t.InsecureSkipVerify = false
	t.VerifyPeerCertificate = nil
	t.VerifyConnection = nil
	t.MinVersion = max(t.MinVersion, tls.VersionTLS12)
	return t
}
