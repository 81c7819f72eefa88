package main

import (
	"context"
	"strings"
	"testing"
	"time"

	migrate "github.com/outboxkeeper/outboxkeeper/infra/sql"
	"github.com/outboxkeeper/outboxkeeper/internal/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testdb"
)

// The init checks the schema version: a database behind the build, or
// ahead of it with a migration not marked compatible, fails the init
// naming both versions; one ahead with compatible migrations only serves.
func TestInitChecksTheSchemaVersion(t *testing.T) {
	t.Parallel()
	latest := migrate.Latest()
	all, err := migrate.Load("outbox")
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
	bin := lambdatest.Build(t, "fill")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := db.Pool.Exec(ctx, c.setup); err != nil {
				t.Fatal(err)
			}
			fn := lambdatest.Start(t, bin, map[string]string{"FILL_WATCH": "false", "DATABASE_URL": db.URL})
			out, err := fn.Invoke(ctx, []byte(`{"source":"outboxkeeper.schedule"}`))
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
