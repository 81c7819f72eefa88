package fill

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/benchkit"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// Benchmarks of the fill with the template's settings (grace 250 ms, tick
// 250 ms, batches and pages of 1000), each against fresh databases and,
// where there is one, against the database's own limit and a naive
// baseline measured side by side in the same run (benchkit: alternating
// arms, medians). `make bench` runs them at full size; under -short (make
// test) they run once at a small size so they cannot rot, and assert
// nothing about time.

// templateConfig is what the deployed fill runs with, bounded or watching.
func templateConfig(bounded bool) Config {
	return Config{Bounded: bounded, PassBudget: 30 * time.Second}.WithDefaults()
}

// burst makes n new sequences above the head, every k-th of them missing
// (allocated, never written), as a burst of writers with crashed ones
// among them leaves them; it returns the first and the new head. k = 1
// leaves all n missing.
func burst(b *testing.B, db *testdb.DB, n, k int64) (first, top int64) {
	first = head(b, db) + 1
	top = first + n - 1
	testdb.Exec(b, db.Pool, `INSERT INTO outbox.events (sequence, topic, payload)
		SELECT g, 't', '{}' FROM generate_series($1::bigint, $2::bigint) g WHERE (g - $1) % $3 <> $3 - 1`, first, top, k)
	testdb.Exec(b, db.Pool, `SELECT setval('outbox.events_sequence_seq', $1)`, top)
	return first, top
}

// bareInsert is the database's limit for writing the placeholders burst
// left missing: one INSERT ... SELECT generate_series of the same rows
// (every k-th of first..top), timed.
func bareInsert(b *testing.B, db *testdb.DB, first, top, k int64) time.Duration {
	return benchkit.Timed(func() {
		testdb.Exec(b, db.Pool, `INSERT INTO outbox.events (sequence, filled_by)
			SELECT g, 'fill' FROM generate_series($1::bigint, $2::bigint) g WHERE (g - $1) % $3 = $3 - 1`, first, top, k)
	})
}

// fillArm is the fill as an arm: one bounded pass with the template's
// settings over a burst of n sequences, every k-th missing, on a fresh
// started database. It fails b unless the pass filled them all up to the
// head, gives each the result, and returns the pass's writes after the
// proof.
func fillArm(b *testing.B, n, k int64, each func(*Result)) benchkit.Arm {
	return benchkit.Arm{Name: "fill", Run: func() time.Duration {
		db := startedDB(b)
		_, top := burst(b, db, n, k)
		res := runPass(b, newService(b, db.Pool, templateConfig(true), Options{}))
		if res.Filled != n/k || res.Watermark != top {
			b.Fatalf("fill: Filled = %d, Watermark = %d, want %d and %d; %v", res.Filled, res.Watermark, n/k, top, res)
		}
		each(res)
		return fillTime(res)
	}}
}

// limitArm is the database's limit as an arm: bareInsert of the
// placeholders a burst of n (every k-th missing) leaves, on a fresh
// started database.
func limitArm(b *testing.B, n, k int64) benchkit.Arm {
	return benchkit.Arm{Name: "limit", Run: func() time.Duration {
		db := startedDB(b)
		first, top := burst(b, db, n, k)
		return bareInsert(b, db, first, top, k)
	}}
}

// reportAgainstLimit reports the fill's and the limit's rows/s for the
// same rows placeholders, and the limit's time over the fill's.
func reportAgainstLimit(b *testing.B, rows int64, fill, limit float64) {
	b.ReportMetric(float64(rows)/fill, "fill-rows/s")
	b.ReportMetric(float64(rows)/limit, "limit-rows/s")
	b.ReportMetric(limit/fill, "fill/limit")
}

// fillTime is the pass's writes after the proof (page reads and inserts,
// Result.FillMS) as a duration.
func fillTime(res *Result) time.Duration { return time.Duration(res.FillMS) * time.Millisecond }

// BenchmarkFillBurst: 10,000 abandoned sequences in one burst (writers
// that all crashed), closed by one bounded pass, against a per-row insert
// loop (one autocommitted INSERT ... ON CONFLICT DO NOTHING a sequence, as
// a naive filler would) and the database's limit, for the same
// placeholders. Targets: the pass's writes after the proof ≥ 0.6 × the
// limit's rows/s and ≥ 20 × the loop's.
func BenchmarkFillBurst(b *testing.B) {
	n := benchkit.Size[int64](10_000, 2_000)
	var cycles []float64
	samples := benchkit.Repeat(b,
		fillArm(b, n, 1, func(res *Result) { cycles = append(cycles, float64(res.Cycles)) }),
		benchkit.Arm{Name: "loop", Run: func() time.Duration {
			db := startedDB(b)
			first, top := burst(b, db, n, 1)
			return benchkit.Timed(func() {
				for s := first; s <= top; s++ {
					testdb.Exec(b, db.Pool, `INSERT INTO outbox.events (sequence, filled_by) VALUES ($1, 'fill') ON CONFLICT (sequence) DO NOTHING`, s)
				}
			})
		}},
		limitArm(b, n, 1),
	)
	fill, loop, limit := samples.Median("fill"), samples.Median("loop"), samples.Median("limit")
	b.ReportMetric(float64(n), "rows")
	b.ReportMetric(benchkit.Median(cycles), "cycles")
	b.ReportMetric(float64(n)/loop, "loop-rows/s")
	reportAgainstLimit(b, n, fill, limit)
	b.ReportMetric(loop/fill, "fill/loop")
}

// BenchmarkFillScatteredGaps: 10,000 gaps scattered among 100,000 new
// sequences, one bounded pass, against the database's limit for the same
// placeholders among the same present rows. Targets: one cycle, one pass;
// its writes after the proof (every page read and insert of the cycle)
// ≥ 0.3 × the limit's rows/s.
func BenchmarkFillScatteredGaps(b *testing.B) {
	n := benchkit.Size[int64](100_000, 10_000)
	var overGraceS, cycles []float64
	samples := benchkit.Repeat(b,
		fillArm(b, n, 10, func(res *Result) {
			took := time.Duration(res.DurationMS) * time.Millisecond
			overGraceS = append(overGraceS, (took - DefaultGrace).Seconds())
			cycles = append(cycles, float64(res.Cycles))
		}),
		limitArm(b, n, 10),
	)
	fill, limit := samples.Median("fill"), samples.Median("limit")
	b.ReportMetric(float64(n/10), "gaps")
	b.ReportMetric(benchkit.Median(cycles), "cycles")
	b.ReportMetric(benchkit.Median(overGraceS), "pass-minus-grace-s")
	reportAgainstLimit(b, n/10, fill, limit)
}

// BenchmarkFillLiveGap: a 200,000-sequence gap appears while a watching
// pass runs. Targets: closed in one cycle, its writes after the proof at
// least 0.3 x the rows/s of the database's limit for the same
// placeholders.
func BenchmarkFillLiveGap(b *testing.B) {
	gap := benchkit.Size[int64](200_000, 20_000)
	var closeS, cycles []float64
	samples := benchkit.Repeat(b,
		benchkit.Arm{Name: "fill", Run: func() time.Duration {
			db := startedDB(b)
			s := newService(b, db.Pool, templateConfig(false), Options{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan *Result, 1)
			go func() {
				res, _ := s.RunOnce(ctx, nil)
				done <- res
			}()
			if err := waitForState(db, holdsLease+` AND started`); err != nil {
				b.Fatal(err)
			}
			from := head(b, db)
			var appeared time.Time
			if err := db.Pool.QueryRow(context.Background(),
				`SELECT clock_timestamp() FROM (SELECT setval('outbox.events_sequence_seq', $1)) s`, from+gap).Scan(&appeared); err != nil {
				b.Fatal(err)
			}
			if err := waitForState(db, fmt.Sprintf(`watermark >= %d`, from+gap)); err != nil {
				b.Fatal(err)
			}
			cancel()
			res := <-done
			var last time.Time
			if err := db.Pool.QueryRow(context.Background(), `SELECT max(recorded_at) FROM outbox.events`).Scan(&last); err != nil {
				b.Fatal(err)
			}
			if res.Filled != gap {
				b.Fatalf("Filled = %d, want %d; %v", res.Filled, gap, res)
			}
			closeS = append(closeS, last.Sub(appeared).Seconds())
			cycles = append(cycles, float64(res.Cycles))
			return fillTime(res)
		}},
		limitArm(b, gap, 1),
	)
	fill, limit := samples.Median("fill"), samples.Median("limit")
	b.ReportMetric(float64(gap), "gap")
	b.ReportMetric(benchkit.Median(cycles), "cycles")
	b.ReportMetric(benchkit.Median(closeS), "closed-after-s")
	reportAgainstLimit(b, gap, fill, limit)
}

// BenchmarkFillWatching: a healthy watching pass (the template's tick)
// over tables of 100k, 1M and 10M rows while a writer commits a few events
// every tick, the three sizes side by side in alternating order. Targets:
// the same statements per tick whatever the size, and database time per
// tick at 10M at most 1.5 x at 100k.
func BenchmarkFillWatching(b *testing.B) {
	sizes := benchkit.Size([]int64{100_000, 1_000_000, 10_000_000}, []int64{10_000, 100_000})
	dbs := map[int64]*testdb.DB{}
	for _, n := range sizes {
		db := testdb.New(b)
		testdb.Exec(b, db.Pool, `INSERT INTO outbox.events (sequence, topic, payload)
			SELECT g, 't', '{}' FROM generate_series(1, $1::bigint) g`, n)
		testdb.Exec(b, db.Pool, `SELECT setval('outbox.events_sequence_seq', $1)`, n)
		testdb.Exec(b, db.Pool, `VACUUM ANALYZE outbox.events`)
		catchUp := templateConfig(true)
		catchUp.PageSize = 100_000
		if res := runPass(b, newService(b, db.Pool, catchUp, Options{})); res.Watermark != n {
			b.Fatalf("catch-up pass over %d rows: Watermark = %d, want %d; %v", n, res.Watermark, n, res)
		}
		dbs[n] = db
	}
	ticks := benchkit.NewPerTick()
	watch := func(n int64) benchkit.Arm {
		return benchkit.Arm{Name: fmt.Sprint(n), Run: func() time.Duration {
			db := dbs[n]
			cfg := templateConfig(false)
			cfg.PassBudget = 5 * time.Second
			t := &benchkit.TimedDB{DB: db.Pool}
			s := newService(b, t, cfg, Options{})
			// Writers committing between ticks. They run beside the pass,
			// so they report an error instead of failing the benchmark
			// from their goroutine, and are waited for before the next arm.
			ctx, cancel := context.WithCancel(context.Background())
			var writers sync.WaitGroup
			var writeErr atomic.Value
			writers.Go(func() {
				for ctx.Err() == nil {
					if _, err := db.Pool.Exec(ctx, `SELECT outbox.publish_batch('t', array_fill('{"real":true}'::jsonb, ARRAY[5]))`); err != nil && ctx.Err() == nil {
						writeErr.Store(err)
						return
					}
					time.Sleep(cfg.Tick / 2)
				}
			})
			res := runPass(b, s)
			cancel()
			writers.Wait()
			if err, _ := writeErr.Load().(error); err != nil {
				b.Fatalf("writer: %v", err)
			}
			return ticks.Record(n, res.Statements, res.Ticks, t.Total())
		}}
	}
	benchkit.Repeat(b, benchkit.Each(sizes, watch)...)
	ticks.Report(b, sizes)
	b.ReportMetric(ticks.Statements(sizes[len(sizes)-1])*float64(time.Minute/DefaultTick), "statements/minute")
}

// BenchmarkFillPooler: one bounded pass with the template's settings over
// 10,000 gaps among 100,000 sequences present at its first run (a cycle
// without grace: the pass's time is its work), on the functions' own pool
// straight to the server and through PgBouncer in transaction mode, each
// on its own copy of the same rows, alternating. Target: through the
// pooler ≤ 1.3 × direct.
func BenchmarkFillPooler(b *testing.B) {
	n := benchkit.Size[int64](100_000, 10_000)
	fresh := testdb.Seeded(b, func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, `INSERT INTO outbox.events (sequence, topic, payload)
			SELECT g, 't', '{}' FROM generate_series(1, $1::bigint) g WHERE g % 10 <> 0`, n); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, `SELECT setval('outbox.events_sequence_seq', $1::bigint)`, n)
		return err
	})
	arm := func(name string, pooled bool) func() time.Duration {
		return func() time.Duration {
			direct, via := fresh().FunctionPools(b)
			pool := direct
			if pooled {
				pool = via
			}
			s := newService(b, pool, templateConfig(true), Options{})
			var res *Result
			took := benchkit.Timed(func() { res = runPass(b, s) })
			if res.Filled != n/10 || res.Watermark != n {
				b.Fatalf("%s: Filled = %d, Watermark = %d, want %d and %d; %v", name, res.Filled, res.Watermark, n/10, n, res)
			}
			return took
		}
	}
	benchkit.ComparePooler(b, arm("direct", false), arm("pgbouncer", true))
}
