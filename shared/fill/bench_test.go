package fill

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testdb"
)

// BenchmarkFillPassCaughtUp times a healthy, caught-up pass over a large
// table against the naive alternative it replaces — reading every sequence
// in order to find gaps — side by side in one process, and reports the
// ratio. The pass costs a handful of statements whatever the table's size;
// the scan grows with it.
func BenchmarkFillPassCaughtUp(b *testing.B) {
	const n = 200_000 // large enough to show the shape, cheap to load
	db := testdb.New(b)
	ctx := context.Background()
	exec(b, db.Pool, `INSERT INTO outbox.events (sequence, topic, payload)
		SELECT g, 't', '{}' FROM generate_series(1, $1::bigint) g`, n)
	exec(b, db.Pool, `SELECT setval('outbox.events_sequence_seq', $1)`, n)
	exec(b, db.Pool, `VACUUM ANALYZE outbox.events`)
	catchUp := testConfig()
	catchUp.PageSize = 100_000
	if res := runPass(b, newService(b, db.Pool, catchUp, Options{})); res.Watermark != n {
		b.Fatalf("catch-up pass: %+v", res)
	}
	s := newService(b, db.Pool, testConfig(), Options{})

	var passTime, scanTime time.Duration
	var statements int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := s.RunOnce(ctx)
		if err != nil || res.Watermark != n {
			b.Fatalf("pass: %v %+v", err, res)
		}
		passTime += time.Since(start)
		statements += res.Statements

		start = time.Now()
		rows, err := db.Pool.Query(ctx, `SELECT sequence FROM outbox.events ORDER BY sequence`)
		if err != nil {
			b.Fatal(err)
		}
		seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(seqs) != n {
			b.Fatalf("scan: %v %d", err, len(seqs))
		}
		scanTime += time.Since(start)
	}
	b.ReportMetric(float64(passTime.Nanoseconds())/float64(b.N), "pass-ns/op")
	b.ReportMetric(float64(scanTime.Nanoseconds())/float64(b.N), "fullscan-ns/op")
	b.ReportMetric(float64(scanTime)/float64(passTime), "fullscan/pass")
	b.ReportMetric(float64(statements)/float64(b.N), "statements/pass")
}
