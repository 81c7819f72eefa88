package outbox_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/benchkit"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testcluster"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
)

// Benchmarks of the read side, each against the database's own limit
// measured side by side in the same run: `make bench` runs them.

// bareRangeScan is what read_events costs at the least: the same page of
// the same rows by a plain index range scan, with no watermark and no
// contiguity test.
const bareRangeScan = `SELECT sequence, xid, coalesce(topic, ''), payload, headers, recorded_at, coalesce(filled_by, ''),
		coalesce(aggregate_type, ''), coalesce(aggregate_id, ''), coalesce(event_type, '')
	FROM outbox.events WHERE sequence > $1 ORDER BY sequence LIMIT $2`

// BenchmarkReadEvents: pages of 100 (Consume's default batch) at random
// positions of a million-row table, through ReadContiguous (read_events,
// as Consume and every language call it) and through the bare range scan
// of the same page, interleaved page by page in alternating order; on the
// two pools a consumer runs on: the functions' pooler-safe one (every
// statement unnamed, QueryExecModeExec: what works behind PgBouncer and
// RDS Proxy) and pgx's default (statements prepared and cached per
// connection). Reported: ns per page each way and the limit's share,
// bare/read_events (target ≥ 0.5), for each pool.
func BenchmarkReadEvents(b *testing.B) {
	db := testdb.New(b)
	ctx := context.Background()
	rows := benchkit.Size[int64](1_000_000, 20_000)
	for _, sql := range []string{
		`INSERT INTO outbox.events (sequence, xid, topic, payload) SELECT g, '5', 'order.placed', '{"id":1,"total":"12.50"}' FROM generate_series(1, $1::bigint) g`,
		`SELECT setval('outbox.events_sequence_seq', $1::bigint)`,
		`UPDATE outbox.fill_state SET started = true, watermark = $1::bigint`,
	} {
		if _, err := db.Pool.Exec(ctx, sql, rows); err != nil {
			b.Fatalf("%s: %v", sql, err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE outbox.events`); err != nil {
		b.Fatal(err)
	}
	// pgx's defaults, as an application's own pool has them.
	appPool, err := pgxpool.New(ctx, db.DirectURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(appPool.Close)
	type pool struct {
		name string
		q    interface {
			Query(context.Context, string, ...any) (pgx.Rows, error)
		}
		ob *outbox.Outbox
	}
	pools := []pool{
		{"pooler-safe", db.Pool, newOutbox(b, db, outbox.Options{})},
		{"pgx-default", appPool, must(outbox.New(appPool, outbox.Options{}))},
	}
	const page = 100
	spent := map[string]time.Duration{}
	viaReadEvents := func(p pool, after int64) {
		start := time.Now()
		got, err := p.ob.ReadContiguous(ctx, after, page)
		spent[p.name+"/read_events"] += time.Since(start)
		if err != nil || len(got) != page {
			b.Fatalf("%s: read_events after %d: %d rows, %v", p.name, after, len(got), err)
		}
	}
	viaBareScan := func(p pool, after int64) {
		start := time.Now()
		r, err := p.q.Query(ctx, bareRangeScan, after, page)
		if err != nil {
			b.Fatal(err)
		}
		// Scanned into the same values ReadContiguous makes, so both
		// sides pay the same decoding.
		evs, err := pgx.CollectRows(r, pgx.RowToStructByPos[outbox.Event])
		spent[p.name+"/bare"] += time.Since(start)
		if err != nil || len(evs) != page {
			b.Fatalf("%s: bare scan after %d: %d rows, %v", p.name, after, len(evs), err)
		}
	}
	const pages = 300
	n := 0
	for b.Loop() {
		for i := range pages {
			// The same page every way, in rotating order, so none always
			// finds the others' pages warm.
			after := rand.Int64N(rows - 2*page)
			arms := []func(){
				func() { viaReadEvents(pools[0], after) }, func() { viaBareScan(pools[0], after) },
				func() { viaReadEvents(pools[1], after) }, func() { viaBareScan(pools[1], after) },
			}
			for j := range arms {
				arms[(i+j)%len(arms)]()
			}
		}
		n += pages
	}
	for _, p := range pools {
		fn, bare := spent[p.name+"/read_events"], spent[p.name+"/bare"]
		b.ReportMetric(float64(fn.Nanoseconds())/float64(n), p.name+"-read_events-ns/page")
		b.ReportMetric(float64(bare.Nanoseconds())/float64(n), p.name+"-bare-ns/page")
		b.ReportMetric(float64(bare)/float64(fn), p.name+"-bare/read_events")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// publishWriters is how many writers publish at once: PostgreSQL
// serialises notifying commits, and group commit pays off only with
// several, so one writer would flatter both.
const publishWriters = 4

// bareEvents is the limit's table: events' columns, constraints and
// indexes, with the sequence a plain column DEFAULT nextval and no xid
// default, as an outbox without outboxkeeper has it.
var bareEvents = []string{
	`CREATE TABLE bare_events (LIKE outbox.events INCLUDING ALL)`,
	`CREATE SEQUENCE bare_events_seq CACHE 1`,
	`ALTER TABLE bare_events ALTER sequence SET DEFAULT nextval('bare_events_seq'), ALTER xid DROP DEFAULT`,
}

// publishSide is one cluster's databases: notifications off in one and on
// in the other (the trigger is per table), each with pgx's default pool,
// as an application's.
type publishSide struct {
	name        string
	off, on     *pgxpool.Pool
	obOff, obOn *outbox.Outbox
	listener    *pgx.Conn
}

func newPublishSide(b *testing.B, name string, newDB func() *testdb.DB) *publishSide {
	ctx := context.Background()
	side := &publishSide{name: name}
	for _, on := range []bool{false, true} {
		db := newDB()
		pc, err := pgxpool.ParseConfig(db.DirectURL)
		if err != nil {
			b.Fatal(err)
		}
		pc.MaxConns = publishWriters + 2
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		ob := must(outbox.New(pool, outbox.Options{}))
		if on {
			side.on, side.obOn = pool, ob
			if _, err := pool.Exec(ctx, `SELECT outbox.set_publish_notifications(true)`); err != nil {
				b.Fatal(err)
			}
			// A listener, as in production: notifications are queued for it.
			side.listener = db.Connect(b)
			if _, err := side.listener.Exec(ctx, `LISTEN outbox_events`); err != nil {
				b.Fatal(err)
			}
			continue
		}
		side.off, side.obOff = pool, ob
		for _, sql := range bareEvents {
			if _, err := pool.Exec(ctx, sql); err != nil {
				b.Fatalf("%s: %v", sql, err)
			}
		}
	}
	return side
}

// drain reads the notifications the last round queued.
func (s *publishSide) drain() {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		_, err := s.listener.WaitForNotification(ctx)
		cancel()
		if err != nil {
			return
		}
	}
}

// round runs perRound one-event transactions split over the writers and
// returns how long they took; tx is one transaction.
func round(b *testing.B, perRound int, tx func(ctx context.Context) error) time.Duration {
	return benchkit.Timed(func() {
		var wg sync.WaitGroup
		for range publishWriters {
			wg.Go(func() {
				for range perRound / publishWriters {
					if err := tx(context.Background()); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
}

var publishPayload = map[string]any{"id": 1, "total": "12.50"}

const publishPayloadJSON = `{"id":1,"total":"12.50"}`

// inTx is one transaction on pool: BEGIN, sql with a topic and a payload,
// COMMIT.
func inTx(pool *pgxpool.Pool, sql string) func(context.Context) error {
	return func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sql, "order.placed", publishPayloadJSON)
			return err
		})
	}
}

// arm is one way to publish on the side: rounds of tx, the side's
// notifications drained after each when it notifies.
func (s *publishSide) arm(b *testing.B, perRound int, name string, notifies bool, tx func(context.Context) error) benchkit.Arm {
	return benchkit.Arm{Name: s.name + "/" + name, Run: func() time.Duration {
		d := round(b, perRound, tx)
		if notifies {
			s.drain()
		}
		return d
	}}
}

// bareInsert is the limit's statement.
const bareInsert = `INSERT INTO bare_events (topic, payload) VALUES ($1, $2::jsonb)`

// insertArms are the plain INSERT, with the notification off and on, and
// the limit.
func (s *publishSide) insertArms(b *testing.B, perRound int) []benchkit.Arm {
	const insert = `INSERT INTO outbox.events (topic, payload) VALUES ($1, $2::jsonb)`
	return []benchkit.Arm{
		s.arm(b, perRound, "bare", false, inTx(s.off, bareInsert)),
		s.arm(b, perRound, "insert", false, inTx(s.off, insert)),
		s.arm(b, perRound, "insert-notify", true, inTx(s.on, insert)),
	}
}

// arms are the side's ways to publish: the Go library (InTx, Tx.Publish)
// and SQL publish() with the notification off and on, and the limit, a
// bare INSERT ... DEFAULT nextval; every one BEGIN, one statement, COMMIT.
func (s *publishSide) arms(b *testing.B, perRound int) []benchkit.Arm {
	goPublish := func(ob *outbox.Outbox) func(context.Context) error {
		return func(ctx context.Context) error {
			return ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
				_, err := tx.Publish(ctx, "order.placed", publishPayload)
				return err
			})
		}
	}
	arm := func(name string, notifies bool, tx func(context.Context) error) benchkit.Arm {
		return s.arm(b, perRound, name, notifies, tx)
	}
	return []benchkit.Arm{
		arm("bare", false, inTx(s.off, bareInsert)),
		arm("go", false, goPublish(s.obOff)),
		arm("go-notify", true, goPublish(s.obOn)),
		arm("sql", false, inTx(s.off, `SELECT outbox.publish($1, $2::jsonb)`)),
		arm("sql-notify", true, inTx(s.on, `SELECT outbox.publish($1, $2::jsonb)`)),
	}
}

// BenchmarkPublish: committed transactions of one event each from 4
// concurrent writers, through shared/outbox (InTx and Tx.Publish: the xid
// first, one round trip) and SQL publish(), with the new-event
// notification off and on, against the limit, a bare INSERT ... DEFAULT
// nextval in the same transaction shape; on the test cluster (the local
// stack: fsync off) and on a throwaway durable cluster (fsync = on,
// synchronous_commit = on, started here with the machine's initdb), all
// arms alternating. Reported: ns per transaction and the ratio to the bare
// insert for each, and the notification's cost. Target: ≤ 1.2 x the bare
// insert with fsync on.
func BenchmarkPublish(b *testing.B) {
	// 2000 transactions an arm and round: with 400 (a tenth of a second
	// with fsync on) one slow flush of the shared disk moved a median by a
	// third, from one run to the next.
	perRound := benchkit.Size(2000, 40)
	sides, perTx := runSides(b, perRound, (*publishSide).arms, "go", "go-notify", "sql", "sql-notify")
	for _, s := range sides {
		b.ReportMetric(perTx(s.name, "go-notify")/perTx(s.name, "go"), s.name+"-notify/plain")
	}
}

// runSides runs armsOf each of publishSides' sides, all alternating, and
// reports for each side the ns per transaction of its bare arm and of each
// named one, and each one's ratio to bare. It returns the sides and
// perTx, a median per transaction, for further ratios.
func runSides(b *testing.B, perRound int, armsOf func(*publishSide, *testing.B, int) []benchkit.Arm, named ...string) (sides []*publishSide, perTx func(side, arm string) float64) {
	sides = publishSides(b)
	var arms []benchkit.Arm
	for _, s := range sides {
		arms = append(arms, armsOf(s, b, perRound)...)
	}
	samples := alternate(b, arms)
	perTx = func(side, arm string) float64 { return samples.Median(side+"/"+arm) / float64(perRound) }
	for _, s := range sides {
		bare := perTx(s.name, "bare")
		b.ReportMetric(bare*1e9, s.name+"-bare-ns/tx")
		for _, arm := range named {
			b.ReportMetric(perTx(s.name, arm)*1e9, s.name+"-"+arm+"-ns/tx")
			b.ReportMetric(perTx(s.name, arm)/bare, s.name+"-"+arm+"/bare")
		}
	}
	return sides, perTx
}

// publishSides are the two clusters a publish benchmark compares on: the
// test cluster (fsync off) and a throwaway durable one (fsync = on,
// synchronous_commit = on, started here with the machine's initdb),
// checked at its start.
func publishSides(b *testing.B) []*publishSide {
	durable := testcluster.Start(b, testcluster.Options{Durable: true, MaxConnections: 50})
	durableURL := durable.URL("postgres", durable.Password, "postgres", "sslmode=disable")
	for setting, want := range map[string]string{"fsync": "on", "synchronous_commit": "on"} {
		var got string
		if err := testdb.NewOn(b, durableURL).Pool.QueryRow(context.Background(), `SELECT current_setting($1)`, setting).Scan(&got); err != nil || got != want {
			b.Fatalf("durable cluster: %s = %q, want %q (%v)", setting, got, want, err)
		}
	}
	return []*publishSide{
		newPublishSide(b, "fsync-off", func() *testdb.DB { return testdb.New(b) }),
		newPublishSide(b, "fsync-on", func() *testdb.DB { return testdb.NewOn(b, durableURL) }),
	}
}

// alternate warms every arm up once, then runs them in rotating order
// once a repetition.
func alternate(b *testing.B, arms []benchkit.Arm) benchkit.Samples {
	for _, a := range arms {
		a.Run() // warm up the pools and every plan
	}
	return benchkit.Repeat(b, arms...)
}

// BenchmarkInsert: committed transactions of one event each from 4
// concurrent writers, by a plain INSERT INTO outbox.events (topic,
// payload) whose defaults take the xid and then allocate (the allocator,
// migration 0019), with the new-event notification off and on, against
// the limit, the bare INSERT ... DEFAULT nextval of BenchmarkPublish; on
// the test cluster and on a throwaway durable one, all arms alternating.
// Reported: ns per transaction and the ratio to the bare insert for each.
// Target: ≤ 1.2 x the bare insert with fsync on.
func BenchmarkInsert(b *testing.B) {
	runSides(b, benchkit.Size(2000, 40), (*publishSide).insertArms, "insert", "insert-notify")
}
