package compensate_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// A database that is down or drops a connection: transient errors are
// retried within the budget, and what still fails is handed out again.

// The database unreachable. The messages are reported failed after
// the configured retries and stay on the queue; once the database is back,
// their redelivery fills them.
func TestDatabaseUnreachableThenRedeliveryFills(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"COMPENSATE_RETRY_ATTEMPTS": "2", "COMPENSATE_RETRY_INTERVAL": "100ms"})
	ctx := context.Background()
	// The source queue hands a failed message out again after 1s.
	if _, err := f.sqs.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(f.src), Attributes: map[string]string{"VisibilityTimeout": "1"}}); err != nil {
		t.Fatal(err)
	}
	first := f.rollback(2)
	second := f.rollback(3)

	down, err := pgxpool.New(ctx, "postgres://nobody@127.0.0.1:"+unusedPort(t)+"/nowhere?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	ev := f.receive(2, 10*time.Second)
	res := process(f.service(down), ctx, ev)
	if res.Failed != 2 {
		t.Errorf("Failed = %d, want both messages", res.Failed)
	}
	wantFailedItems(t, "database down", res, ev.Records[0].MessageId, ev.Records[1].MessageId)
	counts.Want(t, "",
		counts.Of("Retries", res.Retries, 2),
		counts.Of("Statements", int(res.Statements), 3, "a try and 2 retries"),
	)
	f.settle(ev, res.Response())
	f.requireMissing(append(slices.Clone(first), second...))

	// The database is back (a working pool): redelivery fills everything.
	ev = f.receive(2, 10*time.Second)
	for _, m := range ev.Records {
		if m.Attributes["ApproximateReceiveCount"] != "2" {
			t.Errorf("message %s receive count %q, want a redelivery", m.MessageId, m.Attributes["ApproximateReceiveCount"])
		}
	}
	res = process(f.svc, ctx, ev)
	if res.Filled != 5 {
		t.Errorf("after recovery: Filled = %d, want 5", res.Filled)
	}
	wantFailedItems(t, "after recovery", res)
	f.requirePlaceholders(append(first, second...))
}

// COMPENSATE_RETRY_ATTEMPTS counts retries after the first try (§5:
// "retried N times"): 0 tries once.
func TestZeroRetriesTriesOnce(t *testing.T) {
	t.Parallel()
	f := setup(t, map[string]string{"COMPENSATE_RETRY_ATTEMPTS": "0"})
	f.rollback(1)
	down, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:"+unusedPort(t)+"/nowhere?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	res := process(f.service(down), context.Background(), f.receive(1, 10*time.Second))
	counts.Want(t, "",
		counts.Of("Failed", res.Failed, 1),
		counts.Of("Retries", res.Retries, 0),
		counts.Of("Statements", int(res.Statements), 1, "the one try"),
	)
}

// unusedPort is a local port with nothing listening.
func unusedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	return port
}

// A connection the server dropped (here: terminated by an administrator,
// SQLSTATE 57P01) is not reused: the next batch runs on a fresh connection
// and succeeds, retrying if it hit the dead one. Straight to the server in
// both test modes: behind PgBouncer the server connection it kills is the
// pooler's, and the pooler, not the handler, meets the drop.
func TestDroppedConnectionReopened(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ctx := context.Background()
	app := "cmp-drop-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	pc, err := pg.PoolConfig(ctx, pg.Login{URL: f.db.DirectURL}, pg.Options{ApplicationName: app})
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	svc := f.service(pool)

	for round := range 3 {
		xid, seqs := f.abandoned(2)
		ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m", EventSourceARN: f.srcARN,
			Body: body(t, report.Report{XID: xid, HasXID: true, Sequences: seqs})}}}
		res := process(svc, ctx, ev)
		if res.Filled != 2 {
			t.Fatalf("round %d: Filled = %d, want 2; %v", round, res.Filled, res)
		}
		wantFailedItems(t, fmt.Sprintf("round %d", round), res)
		t.Logf("round %d: %d retries", round, res.Retries)
		if killed := f.db.KillSessions(t, app); killed != 1 {
			t.Fatalf("terminated %d of the handler's connections, want its one", killed)
		}
	}
}
