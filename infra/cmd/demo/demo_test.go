package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// TestDemoVerdictPasses runs `make demo` with a 20-second workload against the local
// stack — the real bootstraps under rie, fauxqs, PostgreSQL — on the
// template's own schedules and settings, and requires every check of the
// verdict to pass: committed events consumed exactly once and in order,
// every rolled-back sequence filled (by compensate when reported, by the
// watching fill within its promised bound when not), deliveries settled
// with each lost ack swept back once, no dead letters, no failed
// invocation. The drain waits for the sweep: a lost ack is stuck after the
// template's 60 s, and the sweep runs once a minute.
func TestDemoVerdictPasses(t *testing.T) {
	if testing.Short() {
		testenv.Skip(t, "runs the demo for two minutes")
	}
	// The driver reads the stack from the environment (the AWS SDK does
	// too), so take what is missing from .local/stack.env.
	for _, name := range []string{"DATABASE_URL", "AWS_ENDPOINT_URL_SQS", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_LAMBDA_RIE"} {
		v := testenv.Require(t, name)
		if os.Getenv(name) == "" {
			t.Setenv(name, v)
		}
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	cfg := demoConfig{
		Duration: 20 * time.Second, Drain: 150 * time.Second,
		// Two holds within the run: one reported, one crashed.
		Hold: 4 * time.Second, HoldEvery: 6 * time.Second,
		Publishers: 3,
		// Its own database, so it never clashes with a `make demo` running
		// at the same time.
		Database: "outboxkeeper_demo_test_" + hex.EncodeToString(b),
		WorkDir:  t.TempDir(),
	}
	t.Cleanup(func() { dropDatabase(t, cfg.Database) })

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out bytes.Buffer
	ok, err := run(ctx, cfg, &out, local.NewStatusLine(os.Stderr))
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if !ok {
		t.Fatal("demo verdict: FAIL (see the table above)")
	}
}

func dropDatabase(t *testing.T, name string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		t.Logf("drop %s: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
		t.Logf("drop %s: %v", name, err)
	}
}
