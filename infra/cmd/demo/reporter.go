package main

import (
	"context"

	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// countingReporter passes reports to the SQS reporter and records a failed
// send in the ledger: InTx joins that error to the transaction's own, and
// the verdict must fail on it rather than on the rollback it accompanies.
type countingReporter struct {
	inner outbox.RollbackReporter
	l     *ledger
}

func (r countingReporter) Report(ctx context.Context, rep report.Report) error {
	err := r.inner.Report(ctx, rep)
	if err != nil {
		r.l.fail("rollback report", err)
	}
	return err
}
