package coldplan_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/benchkit"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
)

// statement is one set-based statement, run once at a batch size on a
// fresh cold copy, as its caller sends it: a pass's through pass.Bounded
// (coldplan.Bounded), read_events as a consumer calls it.
type statement struct {
	key string
	run func(ctx context.Context, conn *pgx.Conn, batch int) (int64, error) // rows it did
}

// coldStatements are every set-based statement but compensate's check
// (BenchmarkColdCheck in shared/compensate), in the order they run on one
// copy: the reads before the writes that change what they read. rows is
// the size of each cold table's part a statement works on (so the
// largest batch is half of it).
func coldStatements(schema store.Schema, rows int) []statement {
	events := store.NewEvents(schema)
	return []statement{
		{"fill-page-read", func(ctx context.Context, conn *pgx.Conn, batch int) (int64, error) {
			p, err := events.PresentAfter(ctx, coldplan.Bounded(conn), 0, batch)
			return int64(len(p)), err
		}},
		{"read-events", func(ctx context.Context, conn *pgx.Conn, batch int) (int64, error) {
			ob, err := outbox.New(conn, outbox.Options{Schema: schema.Name()})
			if err != nil {
				return 0, err
			}
			e, err := ob.ReadContiguous(ctx, 0, batch)
			return int64(len(e)), err
		}},
		{"fill-insert", func(ctx context.Context, conn *pgx.Conn, batch int) (int64, error) {
			w, err := events.InsertMissing(ctx, coldplan.Bounded(conn), coldplan.Sequences(int64(rows+1), batch), store.FilledByFill)
			return w.N, err
		}},
		{"compensate-insert", func(ctx context.Context, conn *pgx.Conn, batch int) (int64, error) {
			w, err := events.InsertPlaceholders(ctx, coldplan.Bounded(conn), coldplan.Sequences(int64(rows+1+rows/2), batch), store.FilledByCompensate)
			return w.N, err
		}},
		{"prune-events", func(ctx context.Context, conn *pgx.Conn, batch int) (int64, error) {
			b, err := store.NewEventPrune(schema).Prune(ctx, coldplan.Bounded(conn), store.EventPruneParams{OlderThan: time.Minute, Limit: batch})
			return b.Deleted, err
		}},
		{"sweep-reset", func(ctx context.Context, conn *pgx.Conn, batch int) (int64, error) {
			b, err := store.NewDeliverySweep(schema).ResetStuck(ctx, coldplan.Bounded(conn), store.ResetParams{StuckAfter: time.Minute, Limit: batch})
			return b.Reset, err
		}},
		{"prune-deliveries", func(ctx context.Context, conn *pgx.Conn, batch int) (int64, error) {
			b, err := store.NewDeliveryPrune(schema).Prune(ctx, coldplan.Bounded(conn), store.DeliveryPruneParams{AckedAfter: time.Minute, DeadAfter: -1, Limit: batch})
			return b.Acked, err
		}},
	}
}

// functionConn connects the way the functions do: every statement
// unnamed, planned with its parameters.
func functionConn(b *testing.B, url string) *pgx.Conn {
	b.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// BenchmarkColdStatistics: every set-based statement of the functions
// (the sweep's reset, prune's two deletes, the fill's page read and
// insert, compensate's insert, read_events) on tables fresh from two mass
// UPDATEs, autovacuum off, never analysed, at a batch of 1,000 and of
// 10,000 (100 and 1,000 under -short), each size on a fresh copy of the
// same cold tables, the sizes alternating which goes first. Target: the
// large batch ≤ 12 × the small one (linear is 10 ×). It logs each
// statement's plan (its nested ones too) at each size, and reports the
// plan nodes that did more work than their batch allows (want none).
// And a whole sweep pass over a table of 10,000 cold stuck rows (1,000
// under -short), with the default batch (1,000), against one bare UPDATE
// of them, each on a fresh cold copy.
func BenchmarkColdStatistics(b *testing.B) {
	small, big := benchkit.Size(1_000, 100), benchkit.Size(10_000, 1_000)
	rows := 2 * big // stuck, acked, present and missing: twice the large batch
	fresh := testdb.Seeded(b, func(ctx context.Context, conn *pgx.Conn) error {
		schema := store.MustSchema(testdb.Schema)
		if err := coldplan.Deliveries(ctx, conn, schema, rows, rows); err != nil {
			return err
		}
		if err := coldplan.Events(ctx, conn, schema, rows, rows); err != nil {
			return err
		}
		return coldplan.NeverAnalysed(ctx, conn, schema.Table("deliveries"), schema.Table("events"))
	})
	passRows := big
	freshPass := testdb.Seeded(b, func(ctx context.Context, conn *pgx.Conn) error {
		schema := store.MustSchema(testdb.Schema)
		if err := coldplan.Deliveries(ctx, conn, schema, passRows, 0); err != nil {
			return err
		}
		return coldplan.NeverAnalysed(ctx, conn, schema.Table("deliveries"))
	})
	ctx := context.Background()
	schema := store.MustSchema(testdb.Schema)
	stmts := coldStatements(schema, rows)

	// The plans, once per size, on a copy of their own.
	excess := 0
	for _, batch := range []int{small, big} {
		db := fresh()
		rec, err := coldplan.Record(ctx, db.DirectURL)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range stmts {
			if _, err := s.run(ctx, rec.Conn, batch); err != nil {
				b.Fatalf("%s: %v", s.key, err)
			}
			plans, err := rec.Take()
			if err != nil {
				b.Fatal(err)
			}
			for _, p := range plans {
				if p.Root.Type != "Function Scan" || len(plans) == 1 {
					b.Logf("plan BenchmarkColdStatistics %s@%d: %s", s.key, batch, coldplan.Compact(p))
				}
			}
			for _, e := range coldplan.Check(plans, batch) {
				excess++
				b.Logf("%s@%d: %s", s.key, batch, e)
			}
		}
		rec.Close()
	}

	times := map[string][]float64{}
	once := func(batch int) {
		db := fresh()
		conn := functionConn(b, db.DirectURL)
		for _, s := range stmts {
			var n int64
			var err error
			took := benchkit.Timed(func() { n, err = s.run(ctx, conn, batch) })
			if err != nil {
				b.Fatalf("%s@%d: %v", s.key, batch, err)
			}
			if n != int64(batch) {
				b.Fatalf("%s@%d: did %d rows, want the batch", s.key, batch, n)
			}
			key := fmt.Sprintf("%s@%d", s.key, batch)
			times[key] = append(times[key], took.Seconds())
		}
	}
	pass := func() {
		db := freshPass()
		conn := functionConn(b, db.DirectURL)
		sweep := store.NewDeliverySweep(schema)
		var reset int64
		took := benchkit.Timed(func() {
			for {
				bt, err := sweep.ResetStuck(ctx, coldplan.Bounded(conn), store.ResetParams{StuckAfter: time.Minute, Limit: 1_000})
				if err != nil {
					b.Fatal(err)
				}
				reset += bt.Reset
				if !bt.More {
					return
				}
			}
		})
		if reset != int64(passRows) {
			b.Fatalf("sweep pass: reset %d, want %d", reset, passRows)
		}
		times["sweep-pass"] = append(times["sweep-pass"], took.Seconds())
	}
	bare := func() {
		db := freshPass()
		conn := functionConn(b, db.DirectURL)
		took := benchkit.Timed(func() {
			tag, err := conn.Exec(ctx, `UPDATE `+schema.Table("deliveries")+` SET state = 'pending',
				redeliveries = redeliveries + 1, delivered_at = NULL
				WHERE state = 'delivered' AND delivered_at < now() - interval '1 minute'`)
			if err != nil || tag.RowsAffected() != int64(passRows) {
				b.Fatalf("bare update: %v rows, %v", tag.RowsAffected(), err)
			}
		})
		times["bare-update"] = append(times["bare-update"], took.Seconds())
	}
	arms := []func(){func() { once(small) }, func() { once(big) }, pass, bare}
	rep := 0
	for b.Loop() {
		for i := range arms {
			arms[(rep+i)%len(arms)]()
		}
		rep++
	}

	b.ReportMetric(float64(small), "batch-small")
	b.ReportMetric(float64(big), "batch-big")
	b.ReportMetric(float64(excess), "excess-nodes")
	for _, s := range stmts {
		lo := benchkit.Median(times[fmt.Sprintf("%s@%d", s.key, small)])
		hi := benchkit.Median(times[fmt.Sprintf("%s@%d", s.key, big)])
		b.ReportMetric(lo*1000, s.key+"-small-ms")
		b.ReportMetric(hi*1000, s.key+"-big-ms")
		b.ReportMetric(hi/lo, s.key+"-big/small")
	}
	p, u := benchkit.Median(times["sweep-pass"]), benchkit.Median(times["bare-update"])
	b.ReportMetric(float64(passRows), "pass-rows")
	b.ReportMetric(p*1000, "sweep-pass-ms")
	b.ReportMetric(u*1000, "bare-update-ms")
	b.ReportMetric(p/u, "sweep-pass/bare")
}
