package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/version"
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

// --version answers with the version and the commit instead of "unknown
// command"; `version` adds the schema version the functions require.
func TestVersionNamesTheBuild(t *testing.T) {
	code, out, errs := cli(t, nil, "--version")
	if code != exitOK || errs != "" {
		t.Fatalf("--version exits %d with stderr %q, want 0 and nothing", code, errs)
	}
	if want := "outboxkeeper " + version.Number() + " (commit "; !strings.HasPrefix(out, want) {
		t.Errorf("--version printed %q, want it to start with %q", out, want)
	}
	code, out, _ = cli(t, nil, "version", "--json")
	var v struct {
		Version       string `json:"version"`
		Commit        string `json:"commit"`
		SchemaVersion int    `json:"schema_version"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != exitOK {
		t.Fatalf("version --json exits %d with %q: %v", code, out, err)
	}
	if v.Version != version.Number() || v.Commit == "" || v.SchemaVersion != migrate.Latest().Version() {
		t.Errorf("version --json = %+v, want %s, a commit and schema version %d", v, version.Number(), migrate.Latest().Version())
	}
}

// migrate print --format writes a tool's files into --out, or prints them
// one after the other; a wrong range or format is a usage error naming it.
func TestPrintForAToolWritesOneFilePerMigration(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := cli(t, nil, "migrate", "print", "--format", "golang-migrate", "--from", "12", "--to", "14", "--out", dir)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, name := range []string{"0013_publish_unpinned.up.sql", "0013_publish_unpinned.down.sql", "0014_fill_handover.up.sql", "0014_fill_handover.down.sql"} {
		if !strings.Contains(out, name) {
			t.Errorf("the summary does not name %s: %s", name, out)
		}
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s was not written: %v", name, err)
		}
	}
	code, out, _ = cli(t, nil, "migrate", "print", "--format", "goose", "--from", "13")
	if code != exitOK || !strings.Contains(out, "-- file: 0014_fill_handover.sql\n") || !strings.Contains(out, "-- +goose Up") {
		t.Errorf("goose to stdout: exit %d, %q", code, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", "3"}, "go with --format"},
		{[]string{"--format", "flyway"}, `--format "flyway"`},
		{[]string{"--format", "plain", "--from", "99"}, "--from 99: not a version"},
		{[]string{"--format", "plain", "--after", "0001_events.sql"}, "--after is for the single script"},
	} {
		code, _, errs := cli(t, nil, append([]string{"migrate", "print"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want %d naming %q", c.args, code, errs, exitUsage, c.want)
		}
	}
}
