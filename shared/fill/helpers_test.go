package fill

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Test helpers: real PostgreSQL (a fresh database per test), writers played
// on their own connections.

// clock is real time plus an offset the test can move forward, so a grace
// can "pass" without sleeping it while sleeps inside the pass stay real.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// testConfig is a bounded pass (it ends when caught up) with short waits,
// so most tests read like one scheduled invocation; watching tests clear
// Bounded.
func testConfig() Config {
	return Config{Grace: 200 * time.Millisecond, BatchLimit: 1000, PageSize: 1000, PassBudget: 10 * time.Second,
		Bounded: true, Tick: 50 * time.Millisecond}
}

func newService(t testing.TB, q pass.DB, cfg Config, opts Options) *Service {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	if opts.Metrics == nil {
		opts.Metrics = &metrics.Emitter{Function: "fill", Out: io.Discard}
	}
	s, err := New(q, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// passContext bounds a pass in a test so that a pass stuck on a lock fails
// the test instead of hanging it; far above every test budget, so the
// budget (min with deadline - 2s) is unaffected.
func passContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func runPass(t testing.TB, s *Service) *Result {
	t.Helper()
	ctx, cancel := passContext()
	defer cancel()
	res, err := s.RunOnce(ctx, nil)
	if err != nil {
		t.Fatalf("pass: %v (result %+v)", err, res)
	}
	return res
}

// commit publishes n events in one committed transaction and returns the
// last sequence.
func commit(t testing.TB, db *testdb.DB, n int) int64 {
	t.Helper()
	var last int64
	err := db.Pool.QueryRow(context.Background(),
		`SELECT max(s) FROM outbox.publish_batch('t', array_fill('{"real":true}'::jsonb, ARRAY[$1::int])) AS s`, n).Scan(&last)
	if err != nil {
		t.Fatalf("commit %d: %v", n, err)
	}
	return last
}

// writer is an open transaction on its own connection.
type writer struct {
	t    testing.TB
	conn *pgx.Conn
	tx   pgx.Tx
	pid  int32
}

func openWriter(t testing.TB, db *testdb.DB) *writer {
	t.Helper()
	ctx := context.Background()
	conn := db.Connect(t)
	w := &writer{t: t, conn: conn}
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&w.pid); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.tx = tx
	return w
}

// publish publishes one event inside the open transaction (xid first, then
// the sequence, then the row, all uncommitted).
func (w *writer) publish() int64 {
	w.t.Helper()
	var s int64
	if err := w.tx.QueryRow(context.Background(), `SELECT outbox.publish('t', '{"late":true}')`).Scan(&s); err != nil {
		w.t.Fatal(err)
	}
	return s
}

// allocate takes the xid, then a sequence, without inserting the row yet:
// a writer between its nextval and its insert (§3.1 order).
func (w *writer) allocate() int64 {
	w.t.Helper()
	ctx := context.Background()
	var s int64
	if _, err := w.tx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		w.t.Fatal(err)
	}
	if err := w.tx.QueryRow(ctx, `SELECT nextval('outbox.events_sequence_seq')`).Scan(&s); err != nil {
		w.t.Fatal(err)
	}
	return s
}

// insert writes the row for a sequence allocate() returned.
func (w *writer) insert(s int64) error {
	_, err := w.tx.Exec(context.Background(),
		`INSERT INTO outbox.events (sequence, xid, topic, payload) VALUES ($1, pg_current_xact_id(), 't', '{"late":true}')`, s)
	return err
}

func (w *writer) commit() {
	w.t.Helper()
	if err := w.tx.Commit(context.Background()); err != nil {
		w.t.Fatal(err)
	}
}

func (w *writer) rollback() {
	w.t.Helper()
	if err := w.tx.Rollback(context.Background()); err != nil {
		w.t.Fatal(err)
	}
}

// row is one events row as tests compare it.
type row struct {
	Sequence int64
	Topic    *string
	Payload  *string
	FilledBy *string
	Xmin     string
}

// rows is every events row, by sequence.
func rows(t testing.TB, db *testdb.DB) map[int64]row {
	t.Helper()
	rs, err := db.Pool.Query(context.Background(),
		`SELECT sequence, topic, payload::text, filled_by, xmin::text FROM outbox.events ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	list, err := pgx.CollectRows(rs, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[int64]row, len(list))
	for _, r := range list {
		out[r.Sequence] = r
	}
	return out
}

func isPlaceholder(r row, ok bool) bool { return ok && r.FilledBy != nil && *r.FilledBy == "fill" }
func isReal(r row, ok bool) bool        { return ok && r.FilledBy == nil && r.Topic != nil }

// wantPlaceholders checks that each of seqs is a fill placeholder in got.
func wantPlaceholders(t testing.TB, got map[int64]row, seqs ...int64) {
	t.Helper()
	for _, s := range seqs {
		if r, ok := got[s]; !isPlaceholder(r, ok) {
			t.Errorf("sequence %d: %+v, want a fill placeholder", s, r)
		}
	}
}

// wantReal checks that seq holds a real event in got; what names it.
func wantReal(t testing.TB, got map[int64]row, seq int64, what string) {
	t.Helper()
	if r, ok := got[seq]; !isReal(r, ok) {
		t.Errorf("sequence %d: %+v, want %s", seq, r, what)
	}
}

// wantKept checks that every committed row of before is in after as it
// was: there, never rewritten (the same xmin), the same payload, not a
// placeholder; when names what happened between the two.
func wantKept(t testing.TB, before, after map[int64]row, when string) {
	t.Helper()
	for s, b := range before {
		a, ok := after[s]
		if !ok {
			t.Errorf("committed row %d is gone after %s", s, when)
			continue
		}
		if a.Xmin != b.Xmin {
			t.Errorf("committed row %d: xmin %s, was %s before %s (rewritten)", s, a.Xmin, b.Xmin, when)
		}
		if *a.Payload != *b.Payload {
			t.Errorf("committed row %d: payload %s, was %s before %s", s, *a.Payload, *b.Payload, when)
		}
		if a.FilledBy != nil {
			t.Errorf("committed row %d: filled_by %s after %s, want null", s, *a.FilledBy, when)
		}
	}
}

func head(t testing.TB, db *testdb.DB) int64 {
	t.Helper()
	var h int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT outbox.allocation_head()`).Scan(&h); err != nil {
		t.Fatal(err)
	}
	return h
}

// started runs a first pass over a table holding one committed event, so
// that later gaps are live stalls (grace applies), not historical ones.
func started(t testing.TB, db *testdb.DB) {
	t.Helper()
	commit(t, db, 1)
	res := runPass(t, newService(t, db.Pool, testConfig(), Options{}))
	if !res.Started {
		t.Fatalf("first pass: Started = false, want true; %v", res)
	}
	if res.Watermark != 1 {
		t.Fatalf("first pass: Watermark = %d, want 1; %v", res.Watermark, res)
	}
}

// startedDB is a fresh database whose fill has started.
func startedDB(t testing.TB) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	started(t, db)
	return db
}

// The stall scenes most tests start from, each on a fresh database it
// returns: a started outbox (sequence 1,
// committed and passed over), a stall at sequence 2 and one committed event
// at 3 above it, so the next pass sees a live stall at 2 (a grace applies)
// with the head at 3. They differ in what became of sequence 2's writer.

// stallBehindRollback: sequence 2's writer rolled back, so the gap is
// abandoned and is filled once its grace has passed.
func stallBehindRollback(t testing.TB) (db *testdb.DB, gap int64) {
	t.Helper()
	db = startedDB(t)
	gap, _ = db.Burn(t, 1)
	commit(t, db, 1)
	return db, gap
}

// stallBehindOpenWriter: sequence 2's writer has published it (the row is
// inserted, uncommitted) and stays open, so no proof passes until it ends.
// The caller commits or rolls it back.
func stallBehindOpenWriter(t testing.TB) (db *testdb.DB, w *writer, held int64) {
	t.Helper()
	return stallBehindWriter(t, (*writer).publish)
}

// stallBehindAllocatingWriter: sequence 2's writer has taken its xid and
// the sequence but not inserted the row yet (between its nextval and its
// insert, the §3.1 order), and stays open.
func stallBehindAllocatingWriter(t testing.TB) (db *testdb.DB, w *writer, held int64) {
	t.Helper()
	return stallBehindWriter(t, (*writer).allocate)
}

// stallBehindWriter is the scene with sequence 2's writer open after
// step (what it did with its sequence, which step returns).
func stallBehindWriter(t testing.TB, step func(*writer) int64) (db *testdb.DB, w *writer, held int64) {
	t.Helper()
	db = startedDB(t)
	w = openWriter(t, db)
	held = step(w)
	commit(t, db, 1)
	return db, w, held
}

// wantStalledAt checks that the pass reports the stall at gap; what
// names the point of the test (empty for its only one).
func wantStalledAt(t testing.TB, what string, res *Result, gap int64) {
	t.Helper()
	if what != "" {
		what += ": "
	}
	if res.StalledAt == nil || *res.StalledAt != gap {
		t.Errorf("%sStalledAt = %s, want %d", what, show(res.StalledAt), gap)
	}
}

func waiting(r *Result) string { return r.WaitingFor() }

// wantWaiting checks why the pass ended with work left (one of the
// Waiting* values).
func wantWaiting(t testing.TB, res *Result, want string) {
	t.Helper()
	if got := res.WaitingFor(); got != want {
		t.Errorf("Waiting = %q, want %q; %v", got, want, res)
	}
}

// wantCaughtUp checks that the pass ended with nothing left to wait for.
func wantCaughtUp(t testing.TB, res *Result) {
	t.Helper()
	if res.Waiting != nil {
		t.Errorf("Waiting = %q, want null (caught up); %v", *res.Waiting, res)
	}
}

// show prints an optional value: nil, or what it points to.
func show[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// recorder is a pass.DB that records every statement's SQL, in order.
// The fill sends each statement in a batch behind its timeout (see
// store.Bounded); the recorder notes the statement, not the timeout.
type recorder struct {
	Q   pass.DB
	mu  sync.Mutex
	sql []string
}

func (r *recorder) note(sql string) {
	r.mu.Lock()
	r.sql = append(r.sql, sql)
	r.mu.Unlock()
}

func (r *recorder) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.note(sql)
	return r.Q.Exec(ctx, sql, args...)
}

func (r *recorder) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.note(sql)
	return r.Q.Query(ctx, sql, args...)
}

func (r *recorder) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	r.note(sql)
	return r.Q.QueryRow(ctx, sql, args...)
}

func (r *recorder) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		if !strings.Contains(q.SQL, "set_config('statement_timeout'") {
			r.note(q.SQL)
		}
	}
	return r.Q.SendBatch(ctx, b)
}

// assignsMarker says statement sql assigns a cycle's marker.
func assignsMarker(sql string) bool {
	return strings.Contains(sql, "cycle_marker = pg_current_xact_id()")
}

func (r *recorder) statements() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.sql...)
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.sql = nil
	r.mu.Unlock()
}

// inserts counts the placeholder inserts: every INSERT but the lease's
// upsert.
func (r *recorder) inserts() int {
	n := 0
	for _, q := range r.statements() {
		if strings.Contains(q, "INSERT INTO") && !strings.Contains(q, ".leases") {
			n++
		}
	}
	return n
}

func (r *recorder) count(substr string) int {
	n := 0
	for _, q := range r.statements() {
		if strings.Contains(q, substr) {
			n++
		}
	}
	return n
}

// runPassInBackground starts one pass and returns a function that waits for
// its result, so a test can act (commit, roll back) while the pass waits on
// its grace or proof. A pass that failed ends the test when awaited.
func runPassInBackground(t testing.TB, s *Service) (await func() *Result) {
	type outcome struct {
		res *Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := passContext()
		defer cancel()
		res, err := s.RunOnce(ctx, nil)
		done <- outcome{res, err}
	}()
	return func() *Result {
		t.Helper()
		o := <-done
		if o.err != nil {
			t.Fatalf("pass: %v", o.err)
		}
		return o.res
	}
}

// Points a pass running beside a test reaches, as fill_state and the
// fill's lease show them: conditions for startPassUntil and waitForState.
const (
	// sawStall: the pass recorded the stall and waits out its grace.
	sawStall = `cycle_first_seen_at IS NOT NULL`
	// pollsProof: the pass has taken its marker and polls the proof.
	pollsProof = `cycle_marker IS NOT NULL`
	// holdsLease: the pass holds the lease (and watches, when not bounded).
	holdsLease = `lease_owner IS NOT NULL`
)

// startPassUntil starts a pass in the background and returns once it has
// reached the point cond describes, with the function that awaits its
// result: the test acts (commits, rolls back, kills) at a known point of
// the pass instead of after a guessed sleep.
func startPassUntil(t testing.TB, db *testdb.DB, s *Service, cond string) (await func() *Result) {
	t.Helper()
	await = runPassInBackground(t, s)
	awaitState(t, db, cond)
	return await
}

// waitForState polls fill_state until cond (an SQL boolean over its
// columns and the lease's, as lease_owner and lease_expires_at) holds, so
// a test acts at a known point of a pass running beside it instead of
// after a guessed sleep. Safe to call from any goroutine.
func waitForState(db *testdb.DB, cond string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ok bool
		if err := db.Pool.QueryRow(context.Background(), `SELECT coalesce(bool_or(`+cond+`), false) FROM outbox.fill_state`+withLease).Scan(&ok); err != nil {
			return fmt.Errorf("fill_state %s: %w", cond, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fill_state never reached %s in 10s", cond)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitState is waitForState for the test's own goroutine.
func awaitState(t testing.TB, db *testdb.DB, cond string) {
	t.Helper()
	if err := waitForState(db, cond); err != nil {
		t.Fatal(err)
	}
}

// withLease joins the fill's lease to fill_state, its columns named as
// fill_state's own were before the leases table.
const withLease = ` LEFT JOIN (SELECT owner AS lease_owner, expires_at AS lease_expires_at
	FROM outbox.leases WHERE name = 'fill') AS lease ON true`

// leaseOwner is the fill lease's owner: nil when no pass holds the lease.
func leaseOwner(t testing.TB, db *testdb.DB) *string {
	t.Helper()
	var owner *string
	if err := db.Pool.QueryRow(context.Background(), `SELECT lease_owner FROM outbox.fill_state`+withLease).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	return owner
}

var _ store.Querier = (*recorder)(nil)
