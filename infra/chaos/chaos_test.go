package chaos

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

var (
	duration = flag.Duration("chaos.duration", 60*time.Second, "how long the writers and the faults run")
	settle   = flag.Duration("chaos.settle", 60*time.Second, "the longest wait for quiescence after")
	seed     = flag.Uint64("chaos.seed", 0, "the run's random seed (0: from the clock; printed)")
	workDir  = flag.String("chaos.workdir", "", "where the functions' logs go, kept after the run (default: a temporary directory)")
)

// TestChaos runs the reliability suite once against the local stack and
// fails on any broken promise (see the package comment). make test runs
// the bounded configuration; a long one:
//
//	go test ./infra/chaos -run TestChaos -chaos.duration 15m -timeout 30m -v
func TestChaos(t *testing.T) {
	if testing.Short() {
		testenv.Skip(t, "runs the chaos suite for two minutes")
	}
	// The functions, the SDK and the restart script read the stack from
	// the environment: take what is missing from .local/stack.env.
	for _, name := range []string{"DATABASE_URL", "PGBOUNCER_URL", "AWS_ENDPOINT_URL_SQS", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_LAMBDA_RIE"} {
		v := testenv.Require(t, name)
		if os.Getenv(name) == "" {
			t.Setenv(name, v)
		}
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := DefaultConfig(root)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Duration, cfg.Settle, cfg.WorkDir = *duration, *settle, *workDir
	if cfg.WorkDir == "" {
		cfg.WorkDir = t.TempDir()
	}
	if *seed != 0 {
		cfg.Seed = *seed
	}
	t.Cleanup(func() { dropDatabase(t, cfg.AdminURL, cfg.Database) })
	t.Logf("seed %d", cfg.Seed)

	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+cfg.Settle+3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg, testWriter{t})
	if err != nil {
		t.Fatalf("chaos run: %v", err)
	}
	rep.Print(testWriter{t})
	for _, c := range rep.Checks {
		if !c.OK {
			t.Errorf("%s: %s", c.Name, c.Detail)
		}
	}
}

// testWriter sends the run's output to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func dropDatabase(t *testing.T, adminURL, name string) {
	if err := testdb.Drop(context.Background(), adminURL, name); err != nil {
		t.Logf("drop %s: %v", name, err)
	}
}
