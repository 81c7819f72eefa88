package compensate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/benchkit"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/passtest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/compensate"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// batchBench is a database, a handler on some pool, and fresh batches of
// 10 reports × 100 abandoned sequences.
type batchBench struct {
	b  *testing.B
	db *testdb.DB
}

func newHandler(b *testing.B, pool pass.DB) *compensate.Service {
	return passtest.Compensate(b, pool, compensate.Config{})
}

// allocate hands out n fresh sequences (as abandoned writers would have)
// and returns the first.
func (bb batchBench) allocate(n int) int64 {
	var last int64
	seq := bb.db.Schema.Table("events_sequence_seq")
	if err := bb.db.Pool.QueryRow(context.Background(), `SELECT setval('`+seq+`', `+bb.db.Schema.Table("allocation_head")+`() + $1)`, n).Scan(&last); err != nil {
		bb.b.Fatal(err)
	}
	return last - int64(n) + 1
}

// batch is one SQS batch of 10 reports × 100 fresh sequences.
func (bb batchBench) batch() events.SQSEvent {
	first := bb.allocate(1000)
	ev := events.SQSEvent{}
	for i := range 10 {
		seqs := make([]int64, 100)
		for j := range seqs {
			seqs[j] = first + int64(i*100+j)
		}
		body, _ := report.Encode(report.Report{Sequences: seqs}, 0)
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprint(i), Body: string(body[0])})
	}
	return ev
}

// handle runs one batch through svc and returns its time and statements.
func (bb batchBench) handle(svc *compensate.Service) (time.Duration, int64) {
	ev := bb.batch()
	var res *compensate.Result
	took := benchkit.Timed(func() { res, _ = svc.RunOnce(context.Background(), ev) })
	if res.Filled != 1000 {
		bb.b.Fatalf("handler filled %d, want 1000: %+v", res.Filled, res)
	}
	return took, res.Statements
}

// BenchmarkBatch10x100 handles one batch of 10 reports × 100 sequences
// through the handler (one check, one set-based insert that also
// notifies) and, side by side in the same process and database,
// alternating, with each message handled by its own statements: its check
// and then a statement per sequence, as a loop of round trips would
// ("per-message"), and, for scale, its check and one set-based insert per
// message ("per-message-set"). Reported: ns per batch and statements each
// way and the ratios. Targets: ≤ 3 statements for the batch, ≥ 5 × faster
// than per-message.
func BenchmarkBatch10x100(b *testing.B) {
	db := testdb.New(b)
	bb := batchBench{b: b, db: db}
	svc := newHandler(b, db.Pool)
	ctx := context.Background()
	check := `SELECT ` + db.Schema.Table("allocation_head") + `()`
	insertOne := `INSERT INTO ` + db.Schema.Table("events") + ` (sequence, filled_by) VALUES ($1, 'compensate') ON CONFLICT (sequence) DO NOTHING`
	insertSet := `INSERT INTO ` + db.Schema.Table("events") + ` (sequence, filled_by) SELECT s, 'compensate' FROM unnest($1::bigint[]) s ON CONFLICT (sequence) DO NOTHING`
	statements := map[string][]float64{}
	perMessage := func(name string, insert func(seqs []int64) int) benchkit.Arm {
		return benchkit.Arm{Name: name, Run: func() time.Duration {
			ev := bb.batch()
			n := 0
			took := benchkit.Timed(func() {
				for _, m := range ev.Records {
					r, err := report.Parse([]byte(m.Body), compensate.DefaultMaxSequences)
					if err != nil {
						b.Fatal(err)
					}
					var head int64
					if err := db.Pool.QueryRow(ctx, check).Scan(&head); err != nil {
						b.Fatal(err)
					}
					n += 1 + insert(r.Sequences)
				}
			})
			statements[name] = append(statements[name], float64(n))
			return took
		}}
	}
	exec := func(sql string, args ...any) {
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			b.Fatal(err)
		}
	}
	samples := benchkit.Repeat(b,
		benchkit.Arm{Name: "set", Run: func() time.Duration {
			took, n := bb.handle(svc)
			statements["set"] = append(statements["set"], float64(n))
			return took
		}},
		perMessage("per-message", func(seqs []int64) int {
			for _, s := range seqs {
				exec(insertOne, s)
			}
			return len(seqs)
		}),
		perMessage("per-message-set", func(seqs []int64) int {
			exec(insertSet, seqs)
			return 1
		}),
	)
	set := samples.Median("set")
	for _, arm := range []string{"set", "per-message", "per-message-set"} {
		b.ReportMetric(samples.Median(arm)*1e9, arm+"-ns/batch")
		b.ReportMetric(benchkit.Median(statements[arm]), arm+"-stmts/batch")
	}
	b.ReportMetric(samples.Median("per-message")/set, "per-message/set")
	b.ReportMetric(samples.Median("per-message-set")/set, "per-message-set/set")
}

// BenchmarkCompensatePooler: the same batch through the handler on the
// functions' own pool straight to the server and through PgBouncer in
// transaction mode, alternating. Target: through the pooler ≤ 1.3 ×
// direct.
func BenchmarkCompensatePooler(b *testing.B) {
	db := testdb.New(b)
	bb := batchBench{b: b, db: db}
	direct, pooled := db.FunctionPools(b)
	viaDirect, viaPooler := newHandler(b, direct), newHandler(b, pooled)
	benchkit.ComparePooler(b,
		func() time.Duration { d, _ := bb.handle(viaDirect); return d },
		func() time.Duration { d, _ := bb.handle(viaPooler); return d },
	)
}
