package main_test

import (
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// A statement blocked on a lock another session holds ends the pass on its
// budget: with a 4 s Lambda timeout the invocation still answers, logs its
// line and emits its metrics, instead of "Task timed out".
func TestLockedDeliveriesAnswerBeforeTheLambdaDeadline(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := testenv.Context(t, 30*time.Second)
	db.Hold(t, `LOCK TABLE outbox.deliveries IN ACCESS EXCLUSIVE MODE`)
	lambdatest.BlockedAnswersBeforeDeadline(t, ctx, "sweep", db.URL, []byte(scheduledEvent), 4*time.Second, `"message":"sweep pass"`)
}
