package sweep_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/passtest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// Helpers: a sweep over a fresh real database per test, rows seeded the way
// the relay leaves them.

func testConfig(mut ...func(*sweep.Config)) sweep.Config {
	c := sweep.Config{
		Schema:          testdb.Schema,
		StuckAfter:      time.Minute,
		BatchLimit:      1000,
		MaxRedeliveries: 10,
		PassBudget:      30 * time.Second,
	}
	for _, m := range mut {
		m(&c)
	}
	return c
}

func newSweeper(t testing.TB, db pass.DB, mut ...func(*sweep.Config)) *sweep.Service {
	t.Helper()
	return newSweeperWith(t, db, testConfig(mut...), sweep.Options{})
}

func newSweeperWith(t testing.TB, db pass.DB, cfg sweep.Config, opts sweep.Options) *sweep.Service {
	t.Helper()
	return passtest.Built(sweep.New(db, cfg, opts))(t)
}

func run(t testing.TB, s *sweep.Service) *sweep.Result {
	t.Helper()
	return passtest.Run(t, context.Background(), s)
}

func newOutbox(t testing.TB, db *testdb.DB) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New(db.Pool, outbox.Options{Schema: testdb.Schema})
	if err != nil {
		t.Fatal(err)
	}
	return ob
}

// seedDelivered enqueues n rows and marks them delivered the way the relay
// does (attempts + 1, delivered_at stamped), set-based, with created_at and
// delivered_at both `ago` in the past. Returns the ids in order.
func seedDelivered(t testing.TB, db *testdb.DB, n int, ago time.Duration) []int64 {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`INSERT INTO outbox.deliveries (recipient, kind, payload)
		 SELECT 'agent:' || g, 'work', '\x00'::bytea FROM generate_series(1, $1) g RETURNING id`, n)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	testdb.Exec(t, db.Pool, `UPDATE outbox.deliveries SET state = 'delivered', attempts = attempts + 1,
		created_at = now() - $2::bigint * interval '1 microsecond',
		delivered_at = now() - $2::bigint * interval '1 microsecond' WHERE id = ANY($1)`, ids, ago.Microseconds())
	return ids
}

// invariants fails on rows in an impossible state. acked is terminal, so
// an acked_at on a row that is not acked means something un-acked it.
func invariants(t testing.TB, q store.Querier) {
	t.Helper()
	var bad int64
	if err := q.QueryRow(context.Background(), `SELECT count(*) FROM outbox.deliveries WHERE
		   (state = 'delivered' AND delivered_at IS NULL)
		OR (state = 'acked' AND acked_at IS NULL)
		OR (state <> 'acked' AND acked_at IS NOT NULL)
		OR (state = 'dead' AND dead_at IS NULL)
		OR (state = 'pending' AND delivered_at IS NOT NULL)
		OR redeliveries > attempts
		OR redeliveries < 0`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Fatalf("%d rows in an impossible state", bad)
	}
}

type row struct {
	State        string
	Redeliveries int
	Attempts     int
	DeliveredAt  *time.Time
	DeadAt       *time.Time
}

// wantRow checks a row's state and redeliveries.
func wantRow(t testing.TB, what string, r row, state string, redeliveries int) {
	t.Helper()
	if r.State != state {
		t.Errorf("%s: state %s, want %s", what, r.State, state)
	}
	if r.Redeliveries != redeliveries {
		t.Errorf("%s: redeliveries %d, want %d", what, r.Redeliveries, redeliveries)
	}
}

func deliveryIDs(ds []outbox.Delivery) []int64 {
	ids := make([]int64, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	return ids
}

func get(t testing.TB, q store.Querier, id int64) row {
	t.Helper()
	var r row
	if err := q.QueryRow(context.Background(), `SELECT state, redeliveries, attempts, delivered_at, dead_at
		FROM outbox.deliveries WHERE id = $1`, id).Scan(&r.State, &r.Redeliveries, &r.Attempts, &r.DeliveredAt, &r.DeadAt); err != nil {
		t.Fatal(err)
	}
	return r
}

// ownPool is a pool of its own on the test's database, as another Lambda
// environment (or another relay process) would have.
func ownPool(t testing.TB, db *testdb.DB) *pgxpool.Pool {
	t.Helper()
	return db.NewPool(t, "")
}

// racingSweeps sets up n sweeps, each on its own pool, in batches of
// batchLimit rows so that their statements interleave with each other and
// with whatever else the test runs, all released at once when start is
// closed. The returned function waits for every sweep and returns their
// results in order; a sweep that failed fails the test.
func racingSweeps(t *testing.T, db *testdb.DB, n, batchLimit int, start <-chan struct{}) (wait func() []*sweep.Result) {
	t.Helper()
	results := make([]*sweep.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		s := newSweeper(t, ownPool(t, db), func(c *sweep.Config) { c.BatchLimit = batchLimit })
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.RunOnce(context.Background(), nil)
		})
	}
	return func() []*sweep.Result {
		t.Helper()
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("sweep %d: %v (partial %v)", i, err, results[i])
			}
		}
		return results
	}
}

// resetTotal adds up what the sweeps reset.
func resetTotal(results []*sweep.Result) int64 {
	var n int64
	for _, r := range results {
		n += r.Reset
	}
	return n
}
