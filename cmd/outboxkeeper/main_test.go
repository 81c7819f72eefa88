package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

// cli runs the CLI in-process with exactly vars as its environment.
func cli(t *testing.T, vars map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errs bytes.Buffer
	code = run(context.Background(), args, config.FromMap(vars), &out, &errs)
	return code, out.String(), errs.String()
}

func TestHelpTeaches(t *testing.T) {
	code, out, _ := cli(t, nil, "--help")
	if code != exitOK {
		t.Errorf("--help exits %d, want 0", code)
	}
	for _, want := range []string{"migrate", "DATABASE_URL", "DATABASE_SECRET_ARN", "DATABASE_IAM_AUTH", "DATABASE_CA_PEM", "OUTBOX_SCHEMA"} {
		if !strings.Contains(out, want) {
			t.Errorf("outboxkeeper --help does not mention %s", want)
		}
	}
	code, out, _ = cli(t, nil, "migrate", "--help")
	if code != exitOK {
		t.Errorf("migrate --help exits %d, want 0", code)
	}
	for _, want := range []string{"up", "status", "print", "MigrationsEnabled"} {
		if !strings.Contains(out, want) {
			t.Errorf("outboxkeeper migrate --help does not mention %s", want)
		}
	}
	if code, _, _ := cli(t, nil); code != exitUsage {
		t.Errorf("no command exits %d, want %d", code, exitUsage)
	}
	code, _, errs := cli(t, nil, "migrate", "sideways")
	if code != exitUsage || !strings.Contains(errs, `unknown command "sideways"`) {
		t.Errorf("an unknown subcommand exits %d with %q, want %d naming it", code, errs, exitUsage)
	}
	if code, _, errs := cli(t, nil, "migrate", "print", "--nope"); code != exitUsage || !strings.Contains(errs, "-nope") {
		t.Errorf("an unknown flag exits %d with %q, want %d naming it", code, errs, exitUsage)
	}
}

// withPassword is db's URL with a password in it, for the checks that it
// is never printed (the local cluster trusts its logins, so any password
// is accepted).
const password = "hunter2-never-printed"

func withPassword(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String()
}

func TestMigrateUpAndStatus(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	vars := map[string]string{"DATABASE_URL": withPassword(t, db.URL), "OUTBOX_SCHEMA": "cli_outbox"}
	all, err := migrate.Load("cli_outbox")
	if err != nil {
		t.Fatal(err)
	}
	latest := all[len(all)-1]
	noPassword := func(what, s string) {
		t.Helper()
		if strings.Contains(s, password) {
			t.Errorf("%s prints the password:\n%s", what, s)
		}
	}

	code, out, errs := cli(t, vars, "migrate", "status")
	noPassword("status", out+errs)
	if code != exitAttention {
		t.Errorf("status of an unmigrated schema exits %d, want %d", code, exitAttention)
	}
	for _, m := range all {
		if got := stateIn(out, m.Name); got != "pending" {
			t.Errorf("status lists %s as %q, want pending:\n%s", m.Name, got, out)
		}
	}

	code, out, errs = cli(t, vars, "migrate", "up")
	noPassword("up", out+errs)
	if code != exitOK {
		t.Fatalf("up exits %d: %s%s", code, out, errs)
	}
	if want := fmt.Sprintf("applied %d, already applied 0", len(all)); !strings.Contains(out, want) {
		t.Errorf("up does not say %q:\n%s", want, out)
	}
	if want := fmt.Sprintf("now at version %d (%s)", latest.Version(), latest.Name); !strings.Contains(out, want) {
		t.Errorf("up does not say %q:\n%s", want, out)
	}

	code, out, errs = cli(t, vars, "migrate", "status")
	noPassword("status", out+errs)
	if code != exitOK {
		t.Errorf("status after up exits %d, want 0:\n%s", code, out)
	}
	for _, m := range all {
		if stateIn(out, m.Name) != "applied" || !strings.Contains(out, m.Checksum[:12]) {
			t.Errorf("status does not list %s with its checksum %s:\n%s", m.Name, m.Checksum[:12], out)
		}
	}
	if strings.Contains(out, "pending") {
		t.Errorf("status after up still shows pending:\n%s", out)
	}

	code, out, _ = cli(t, vars, "migrate", "status", "--json")
	var doc struct {
		Ready      bool `json:"ready"`
		Migrations []struct {
			Name, State, Checksum string
		} `json:"migrations"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status --json is not JSON: %v\n%s", err, out)
	}
	if code != exitOK || !doc.Ready || len(doc.Migrations) != len(all) || doc.Migrations[0].Checksum != all[0].Checksum {
		t.Errorf("status --json exits %d with %+v", code, doc)
	}

	// A file changed after it was applied: status says so, up refuses.
	db.Exec(t, `UPDATE cli_outbox.schema_migrations SET checksum = 'ab' || checksum WHERE name = $1`, all[1].Name)
	code, out, _ = cli(t, vars, "migrate", "status")
	if code != exitAttention || stateIn(out, all[1].Name) != "changed" {
		t.Errorf("status with a changed file exits %d:\n%s", code, out)
	}
	code, _, errs = cli(t, vars, "migrate", "up")
	if code != exitError || !strings.Contains(errs, "changed after it was applied") {
		t.Errorf("up with a changed file exits %d: %s", code, errs)
	}
}

func TestLoginFailureNeverPrintsThePassword(t *testing.T) {
	vars := map[string]string{"DATABASE_URL": "postgres://app:" + password + "@127.0.0.1:1/app?connect_timeout=2"}
	code, out, errs := cli(t, vars, "migrate", "status")
	if code != exitError {
		t.Errorf("status against nothing exits %d, want %d", code, exitError)
	}
	if strings.Contains(out+errs, password) {
		t.Errorf("the error prints the password: %s", errs)
	}
	if code, _, errs := cli(t, map[string]string{}, "migrate", "up"); code != exitError || !strings.Contains(errs, "DATABASE_URL") {
		t.Errorf("up without a login exits %d with %q, want an error naming DATABASE_URL", code, errs)
	}
}

// print needs no database: a DBA renders the SQL anywhere.
func TestPrintNeedsNoDatabase(t *testing.T) {
	code, out, errs := cli(t, map[string]string{}, "migrate", "print", "--schema", "billing_outbox")
	if code != exitOK {
		t.Fatalf("print exits %d: %s", code, errs)
	}
	latest := migrate.Latest()
	for _, want := range []string{"BEGIN;", `CREATE SCHEMA IF NOT EXISTS "billing_outbox"`, "'" + latest.Name + "', '" + latest.Checksum + "'", "COMMIT;"} {
		if !strings.Contains(out, want) {
			t.Errorf("print lacks %q", want)
		}
	}
	if code, _, _ := cli(t, map[string]string{}, "migrate", "print", "--schema", "Bad Name"); code != exitUsage {
		t.Errorf("print with a bad schema exits %d, want %d", code, exitUsage)
	}
	if code, _, errs := cli(t, map[string]string{}, "migrate", "print", "--after", "0099_nope.sql"); code != exitError || !strings.Contains(errs, "0099_nope.sql") {
		t.Errorf("print --after an unknown migration exits %d with %q", code, errs)
	}
}

// stateIn is the STATE column of the status table's row for name.
func stateIn(table, name string) string {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == name {
			return f[1]
		}
	}
	return ""
}
