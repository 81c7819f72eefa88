package compensate_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/compensate"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// BenchmarkBatch10x100 handles one batch of 10 reports × 100 sequences
// through the handler (one check, one set-based insert that also notifies) and,
// side by side in the same process and database, inserts the same number
// of sequences one statement per sequence, as a loop of round trips would.
// Reported: ns per batch for each, statements for each, and the ratio
// loop/set (how many times faster the set-based handler is).
func BenchmarkBatch10x100(b *testing.B) {
	db := testdb.New(b)
	svc, err := compensate.New(db.Pool, compensate.Config{}, compensate.Options{
		SQS:     sqstest.Client(b),
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: &metrics.Emitter{Function: "compensate", Out: io.Discard},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	seq := db.Schema.Table("events_sequence_seq")
	one := `INSERT INTO ` + db.Schema.Table("events") + ` (sequence, filled_by) VALUES ($1, 'compensate') ON CONFLICT (sequence) DO NOTHING`

	// allocate hands out n fresh sequences (as abandoned writers would
	// have) and returns the first.
	allocate := func(n int) int64 {
		var last int64
		if err := db.Pool.QueryRow(ctx, `SELECT setval('`+seq+`', `+db.Schema.Table("allocation_head")+`() + $1)`, n).Scan(&last); err != nil {
			b.Fatal(err)
		}
		return last - int64(n) + 1
	}
	var setTime, loopTime time.Duration
	var setStatements, loopStatements int64
	for b.Loop() {
		b.StopTimer()
		first := allocate(1000)
		ev := events.SQSEvent{}
		for i := range 10 {
			seqs := make([]int64, 100)
			for j := range seqs {
				seqs[j] = first + int64(i*100+j)
			}
			body, _ := report.Encode(report.Report{Sequences: seqs}, 0)
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprint(i), Body: string(body[0])})
		}
		loopFirst := allocate(1000)
		b.StartTimer()

		t0 := time.Now()
		res, _ := svc.RunOnce(ctx, ev)
		setTime += time.Since(t0)
		setStatements += res.Statements
		if res.Filled != 1000 {
			b.Fatalf("handler filled %d, want 1000: %+v", res.Filled, res)
		}

		t0 = time.Now()
		for s := loopFirst; s < loopFirst+1000; s++ {
			if _, err := db.Pool.Exec(ctx, one, s); err != nil {
				b.Fatal(err)
			}
			loopStatements++
		}
		loopTime += time.Since(t0)
	}
	n := float64(b.N)
	b.ReportMetric(float64(setTime.Nanoseconds())/n, "set-ns/batch")
	b.ReportMetric(float64(loopTime.Nanoseconds())/n, "loop-ns/batch")
	b.ReportMetric(float64(setStatements)/n, "set-stmts/batch")
	b.ReportMetric(float64(loopStatements)/n, "loop-stmts/batch")
	b.ReportMetric(float64(loopTime)/float64(setTime), "loop/set")
}
