package migrations_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/repo"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testcluster"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

// iamOwnerSteps is the shell the IAM-only owner section of
// docs/database-setup.md gives, from its export line to the end of its
// block (the line before sets the variables, which the test sets itself).
func iamOwnerSteps(t *testing.T) string {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "database-setup.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## IAM-only owners\n")
	if !ok {
		t.Fatal("docs/database-setup.md has no IAM-only owners section")
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatal("the IAM-only owners section has no sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	_, steps, ok := strings.Cut(block, "\nexport PGPASSWORD=")
	if !ok {
		t.Fatalf("the block does not put a token in PGPASSWORD:\n%s", block)
	}
	return "export PGPASSWORD=" + steps
}

// A token shaped like an RDS IAM token: a presigned query, 900-odd
// characters of &, =, % and base64.
func tokenLike(host string, port int) string {
	return fmt.Sprintf("%s:%d/?Action=connect&DBUser=outbox_owner&X-Amz-Algorithm=AWS4-HMAC-SHA256"+
		"&X-Amz-Credential=ASIAEXAMPLEEXAMPLE12%%2F20260101%%2Feu-west-1%%2Frds-db%%2Faws4_request&X-Amz-Date=20260101T120000Z"+
		"&X-Amz-Expires=900&X-Amz-SignedHeaders=host&X-Amz-Security-Token=%s&X-Amz-Signature=%s",
		host, port, strings.Repeat("IQoJb3JpZ2luX2VjEJr%2F%2F%2F%2F%2BwEaCWV1LXdlc3QtMSJH", 12), strings.Repeat("0123456789abcdef", 4))
}

// The IAM-only owner's steps, as the doc writes them: the token in
// PGPASSWORD, psql with verify-full against the CA bundle, the three
// grants. A stand-in prints the token where `aws rds
// generate-db-auth-token` would (only RDS issues and checks real ones);
// the owner's password is that token, on a cluster of the test's own with
// TLS and password logins.
func TestIAMOnlyOwnerGrantsAsTheDocSays(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("psql"); err != nil {
		t.Fatalf("psql: %v (apt-get install postgresql-client)", err)
	}
	steps := iamOwnerSteps(t)
	ca := testcluster.NewCA(t, "rds-ca stand-in")
	c := testcluster.Start(t, testcluster.Options{TLS: ca.Issue(t, "127.0.0.1")})
	token := tokenLike("127.0.0.1", c.Port)
	c.Exec(t, `CREATE ROLE outbox_owner LOGIN PASSWORD '`+token+`'`)
	c.Exec(t, `GRANT CREATE ON DATABASE postgres TO outbox_owner`)
	for _, r := range []string{"app_writer", "outboxkeeper_fn", "oncall"} {
		c.Exec(t, `CREATE ROLE `+r+` LOGIN`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	owner, err := pgx.Connect(ctx, c.URL("outbox_owner", token, "postgres", "sslmode=require"))
	if err != nil {
		t.Fatalf("the owner's login with the token as its password: %v", err)
	}
	defer owner.Close(context.Background())
	if _, err := migrate.Apply(ctx, owner, "outbox"); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rds-ca.pem"), ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// The stand-in insists on the arguments the doc passes.
	want := fmt.Sprintf("rds generate-db-auth-token --hostname 127.0.0.1 --port %d --region eu-west-1 --username outbox_owner", c.Port)
	stub := "#!/bin/sh\n[ \"$*\" = '" + want + "' ] || { echo \"aws stand-in: unexpected arguments: $*\" >&2; exit 2; }\nprintf '%s\\n' '" + token + "'\n"
	if err := os.WriteFile(filepath.Join(bin, "aws"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "HOME=" + dir,
		"HOST=127.0.0.1", fmt.Sprintf("PORT=%d", c.Port), "DB=postgres", "REGION=eu-west-1", "OWNER=outbox_owner"}
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", steps)
	cmd.Dir, cmd.Env = dir, env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the doc's steps failed: %v\n%s\n--- steps:\n%s", err, out, steps)
	}

	var granted string
	if err := owner.QueryRow(ctx, `SELECT string_agg(role_name || ':' || kind, ' ' ORDER BY role_name) FROM outbox.role_grants`).Scan(&granted); err != nil {
		t.Fatal(err)
	}
	if granted != "app_writer:writer oncall:operator outboxkeeper_fn:maintainer" {
		t.Errorf("role_grants after the doc's steps: %q, want the writer, the maintainer and the operator", granted)
	}

	// verify-full is what protects the token: against a CA that did not
	// sign the server's certificate, psql refuses before sending it.
	other := testcluster.NewCA(t, "another CA")
	if err := os.WriteFile(filepath.Join(dir, "rds-ca.pem"), other.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", steps)
	cmd.Dir, cmd.Env = dir, env
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "certificate verify failed") {
		t.Errorf("with another CA's bundle the steps: %v\n%s\nwant psql to refuse the server's certificate", err, out)
	}
}
