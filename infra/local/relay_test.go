package local

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/repo"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// With a RelayTarget the driver runs the relay as the template deploys
// it: the template's schedule fires at once, two instances for the
// hand-over, the template's timeout and its parameters' defaults (a
// watching pass), and the events committed reach the target while that
// first pass watches. Without one, no relay runs.
func TestTheRelayRunsAsTheTemplateDeploysItWithATarget(t *testing.T) {
	admin := testenv.Require(t, "DATABASE_URL")
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	queue := sqstest.NewQueue(t, sqstest.Client(t), "local-relay", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := Start(ctx, Options{
		RepoRoot: root, AdminURL: admin, Database: fmt.Sprintf("local_relay_%d", time.Now().UnixNano()), Fresh: true,
		Schema: "outbox", QueueName: fmt.Sprintf("local-relay-%d", time.Now().UnixNano()),
		RelayTarget: queue, WorkDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer s.Queues.Delete(context.WithoutCancel(ctx), s.SQS)
	if len(s.Relays) != s.Template.RelayConcurrency || s.Functions[Relay] == nil {
		t.Fatalf("%d relay instances, want the template's %d", len(s.Relays), s.Template.RelayConcurrency)
	}
	env := s.FunctionEnv(Relay)
	if env["RELAY_TARGET"] != queue {
		t.Errorf("RELAY_TARGET = %q, want the option's %s", env["RELAY_TARGET"], queue)
	}
	if env["RELAY_WATCH"] != "true" || env["RELAY_PASS_BUDGET"] != "85s" {
		t.Errorf("RELAY_WATCH %q RELAY_PASS_BUDGET %q, want the template's true and 85s", env["RELAY_WATCH"], env["RELAY_PASS_BUDGET"])
	}
	if env["AWS_LAMBDA_FUNCTION_TIMEOUT"] != "90" {
		t.Errorf("the relay's timeout %q, want the template's 90", env["AWS_LAMBDA_FUNCTION_TIMEOUT"])
	}
	run := make(chan struct{})
	go func() { defer close(run); s.Run(ctx) }()
	db, err := pgx.Connect(ctx, s.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	for i := range 3 {
		if _, err := db.Exec(ctx, `SELECT outbox.publish('local.relay', $1::jsonb)`, fmt.Sprintf(`{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := sqstest.Drain(t, sqstest.Client(t), queue, 3, 30*time.Second); len(got) != 3 {
		t.Errorf("the target received %d events, want the 3 committed", len(got))
	}
	cancel()
	<-run

	none := &Stack{}
	for _, fn := range none.functions() {
		if fn == Relay {
			t.Error("without a RelayTarget the driver runs the relay")
		}
	}
}
