package lambdatest

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	migrations "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

// InitChecksTheSchemaVersion is every function's version-check test: built
// and started under aws-lambda-rie with env (plus the test database's
// DATABASE_URL) and invoked with event, the function must fail its init
// naming both versions when the database is behind the build, or ahead of
// it with a migration not marked compatible, and serve when it is ahead
// with compatible migrations only.
func InitChecksTheSchemaVersion(t *testing.T, function string, env map[string]string, event []byte) {
	t.Helper()
	latest := migrations.Latest()
	all, err := migrations.Load("outbox")
	if err != nil {
		t.Fatal(err)
	}
	previous := all[len(all)-2]
	cases := []struct {
		name  string
		setup string
		wants []string // empty: the invocation succeeds
	}{
		{"behind", `DELETE FROM outbox.schema_migrations WHERE name = '` + latest.Name + `'`,
			[]string{"check the schema version", previous.Name, latest.Name, "outboxkeeper migrate up"}},
		{"ahead", `INSERT INTO outbox.schema_migrations (name, checksum) VALUES ('9999_newer.sql', 'x')`,
			[]string{"check the schema version", "9999_newer.sql", latest.Name, "not marked compatible"}},
		{"ahead, compatible", `INSERT INTO outbox.schema_migrations (name, checksum, compatible) VALUES ('9999_newer.sql', 'x', true)`, nil},
	}
	bin := Build(t, function)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := db.Pool.Exec(ctx, c.setup); err != nil {
				t.Fatal(err)
			}
			fnEnv := maps.Clone(env)
			if fnEnv == nil {
				fnEnv = map[string]string{}
			}
			fnEnv["DATABASE_URL"] = db.URL
			fn := Start(t, bin, fnEnv)
			out, err := fn.Invoke(ctx, event)
			if len(c.wants) == 0 {
				if err != nil {
					t.Fatalf("invoke: %v\n%s", err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("the invocation succeeded with the schema %s the build: %s", c.name, out)
			}
			logs := fn.AwaitLogs(func(l string) bool { return strings.Contains(l, "check the schema version") })
			for _, want := range c.wants {
				if !strings.Contains(logs, want) {
					t.Errorf("the init's log does not say %q:\n%s", want, logs)
				}
			}
		})
	}
}
