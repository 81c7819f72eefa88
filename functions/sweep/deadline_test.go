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

	fn := lambdatest.Start(t, lambdatest.Build(t, "sweep"), map[string]string{
		"DATABASE_URL":                db.URL,
		"AWS_LAMBDA_FUNCTION_TIMEOUT": "4",
	})
	lambdatest.AnswersBeforeDeadline(t, ctx, fn, []byte(scheduledEvent), 4*time.Second, `"message":"sweep pass"`)
}
