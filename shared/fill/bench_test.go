package fill

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testdb"
)

// Benchmarks of the fill with the template's settings (grace 2 s, tick
// 500 ms, batches and pages of 1000), each against a fresh database and,
// where there is one, against the database's own limit measured in the
// same run. `make bench` runs them at full size; under -short (make test)
// they run once at a small size so they cannot rot, and assert nothing
// about time.

// templateConfig is what the deployed fill runs with, bounded or watching.
func templateConfig(bounded bool) Config {
	return Config{Bounded: bounded, PassBudget: 30 * time.Second}.WithDefaults()
}

func benchSize(full, short int64) int64 {
	if testing.Short() {
		return short
	}
	return full
}

// median of the samples.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// burst makes n new sequences above the head, every k-th of them missing
// (allocated, never written), as a burst of writers with crashed ones
// among them leaves them; it returns the new head.
func burst(b *testing.B, db *testdb.DB, n, k int64) int64 {
	first := head(b, db) + 1
	exec(b, db.Pool, `INSERT INTO outbox.events (sequence, topic, payload)
		SELECT g, 't', '{}' FROM generate_series($1::bigint, $2::bigint) g WHERE (g - $1) % $3 <> $3 - 1`, first, first+n-1, k)
	exec(b, db.Pool, `SELECT setval('outbox.events_sequence_seq', $1)`, first+n-1)
	return first + n - 1
}

// bareInsert is the database's limit for writing these placeholders: one
// INSERT ... SELECT generate_series of the same rows, in seconds.
func bareInsert(b *testing.B, lo, hi int64) float64 {
	db := testdb.New(b)
	start := time.Now()
	exec(b, db.Pool, `INSERT INTO outbox.events (sequence, filled_by) SELECT g, 'fill' FROM generate_series($1::bigint, $2::bigint) g`, lo, hi)
	return time.Since(start).Seconds()
}

// BenchmarkFillScatteredGaps: 10,000 gaps scattered among 100,000 new
// sequences, one bounded pass with the template's settings. Target: one
// cycle, one pass, at most grace + 1 s of pass time.
func BenchmarkFillScatteredGaps(b *testing.B) {
	n := benchSize(100_000, 10_000)
	var passS, overGraceS, cycles []float64
	for range b.N {
		db := testdb.New(b)
		started(b, db)
		top := burst(b, db, n, 10)
		res := runPass(b, newService(b, db.Pool, templateConfig(true), Options{}))
		if res.Watermark != top {
			b.Fatalf("Watermark = %d, want %d; %v", res.Watermark, top, res)
		}
		if res.Filled != n/10 {
			b.Fatalf("Filled = %d, want %d; %v", res.Filled, n/10, res)
		}
		took := time.Duration(res.DurationMS) * time.Millisecond
		passS = append(passS, took.Seconds())
		overGraceS = append(overGraceS, (took - DefaultGrace).Seconds())
		cycles = append(cycles, float64(res.Cycles))
	}
	b.ReportMetric(float64(n/10), "gaps")
	b.ReportMetric(median(cycles), "cycles")
	b.ReportMetric(median(passS), "pass-s")
	b.ReportMetric(median(overGraceS), "pass-minus-grace-s")
}

// BenchmarkFillLiveGap: a 200,000-sequence gap appears while a watching
// pass runs. Targets: closed within grace + 5 s of appearing, in one
// cycle, its writes after the proof at least 0.3 x the rows/s of a bare
// INSERT ... SELECT generate_series of the same placeholders, measured
// alternately in the same run.
func BenchmarkFillLiveGap(b *testing.B) {
	gap := benchSize(200_000, 20_000)
	var closeS, writeS, limitS, cycles []float64
	for range b.N {
		db := testdb.New(b)
		started(b, db)
		s := newService(b, db.Pool, templateConfig(false), Options{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan *Result, 1)
		go func() {
			res, _ := s.RunOnce(ctx)
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
		writeS = append(writeS, float64(res.FillMS)/1000)
		cycles = append(cycles, float64(res.Cycles))
		limitS = append(limitS, bareInsert(b, from+1, from+gap))
	}
	b.ReportMetric(float64(gap), "gap")
	b.ReportMetric(median(cycles), "cycles")
	b.ReportMetric(median(closeS), "closed-after-s")
	b.ReportMetric(float64(gap)/median(writeS), "fill-rows/s")
	b.ReportMetric(float64(gap)/median(limitS), "limit-rows/s")
	b.ReportMetric(median(limitS)/median(writeS), "fill/limit")
}

// timed is a store.DB that adds up the time its statements take, so a
// watching pass's database work can be told from its sleeps.
type timed struct {
	db store.DB
	ns atomic.Int64
}

func (t *timed) add(start time.Time) { t.ns.Add(int64(time.Since(start))) }

func (t *timed) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	defer t.add(time.Now())
	return t.db.Exec(ctx, sql, args...)
}

func (t *timed) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	defer t.add(time.Now())
	return t.db.Query(ctx, sql, args...)
}

func (t *timed) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	defer t.add(time.Now())
	return t.db.QueryRow(ctx, sql, args...)
}

// SendBatch is timed until its results are closed.
func (t *timed) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return &timedBatch{BatchResults: t.db.SendBatch(ctx, b), t: t, start: time.Now()}
}

type timedBatch struct {
	pgx.BatchResults
	t     *timed
	start time.Time
}

func (b *timedBatch) Close() error {
	defer b.t.add(b.start)
	return b.BatchResults.Close()
}

// BenchmarkFillWatching: a healthy watching pass (the template's tick)
// over tables of 100k, 1M and 10M rows while a writer commits a few events
// every tick. Targets: the same statements per tick whatever the size, and
// database time per tick at 10M at most 1.5 x at 100k.
func BenchmarkFillWatching(b *testing.B) {
	sizes := []int64{100_000, 1_000_000, 10_000_000}
	if testing.Short() {
		sizes = []int64{10_000, 100_000}
	}
	perTick := map[int64]float64{}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			db := testdb.New(b)
			exec(b, db.Pool, `INSERT INTO outbox.events (sequence, topic, payload)
				SELECT g, 't', '{}' FROM generate_series(1, $1::bigint) g`, n)
			exec(b, db.Pool, `SELECT setval('outbox.events_sequence_seq', $1)`, n)
			exec(b, db.Pool, `VACUUM ANALYZE outbox.events`)
			catchUp := templateConfig(true)
			catchUp.PageSize = 100_000
			if res := runPass(b, newService(b, db.Pool, catchUp, Options{})); res.Watermark != n {
				b.Fatalf("catch-up pass: Watermark = %d, want %d; %v", res.Watermark, n, res)
			}
			var stmts, dbNS []float64
			for range b.N {
				cfg := templateConfig(false)
				cfg.PassBudget = 5 * time.Second
				t := &timed{db: db.Pool}
				s := newService(b, t, cfg, Options{})
				// Writers committing between ticks. They run beside the
				// pass, so they report an error instead of failing the
				// benchmark from their goroutine, and are waited for
				// before the next round.
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
				stmts = append(stmts, float64(res.Statements)/float64(res.Ticks))
				dbNS = append(dbNS, float64(t.ns.Load())/float64(res.Ticks))
			}
			perTick[n] = median(dbNS)
			b.ReportMetric(median(stmts), "statements/tick")
			b.ReportMetric(median(stmts)*float64(time.Minute/DefaultTick), "statements/minute")
			b.ReportMetric(median(dbNS)/1e6, "db-ms/tick")
			if smallest := perTick[sizes[0]]; smallest > 0 {
				b.ReportMetric(perTick[n]/smallest, "db-time/smallest-table")
			}
		})
	}
}
