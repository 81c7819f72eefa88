package outbox_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for the database/sql recipe

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// publishCommitted publishes n events in one committed transaction.
func publishCommitted(t *testing.T, ob *outbox.Outbox, n int) []int64 {
	t.Helper()
	var seqs []int64
	err := ob.InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
		payloads := make([]any, n)
		for i := range payloads {
			payloads[i] = map[string]int{"i": i}
		}
		var err error
		seqs, err = tx.Publish(ctx, "t", payloads...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return seqs
}

// A consumer moves across a pruned prefix (absent, at or below the fill
// watermark: passed over) and stops at a gap above the watermark that is
// not yet proven (its writer still runs), in Go and in SQL alike; once the
// writer commits, it moves on.
func TestConsumerCrossesAPrunedPrefixAndStopsAtAnUnprovenGap(t *testing.T) {
	t.Parallel()
	db, ob := newScene(t)
	ctx := context.Background()
	publishCommitted(t, ob, 10) // 1..10
	// The fill has passed 10; prune deletes 1..6 (recorded long ago).
	db.Exec(t, `UPDATE outbox.fill_state SET started = true, watermark = 10`)
	db.Exec(t, `UPDATE outbox.events SET recorded_at = now() - interval '2 days' WHERE sequence <= 6`)
	pr, err := prune.New(db.Pool, prune.Config{Schema: testdb.Schema, EventsAfter: 24 * time.Hour}, prune.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := pr.RunOnce(ctx, nil); err != nil || res.DeletedEvents != 6 {
		t.Fatalf("prune: %v, %v; want 6 events deleted", res, err)
	}
	// A writer holds 11 and has not committed; 12 commits.
	writer := db.Connect(t)
	wtx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer wtx.Rollback(ctx) //nolint:errcheck // the test's end
	var held int64
	if err := wtx.QueryRow(ctx, `SELECT outbox.publish('t', '{"late":true}')`).Scan(&held); err != nil || held != 11 {
		t.Fatalf("held writer got %d, %v; want 11", held, err)
	}
	publishCommitted(t, ob, 1) // 12

	got, err := ob.ReadContiguous(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := testdb.Span(7, 10); !slices.Equal(sequencesOf(got), want) {
		t.Errorf("ReadContiguous(0) = %v, want %v: over the pruned 1..6, stopping before the unproven 11", sequencesOf(got), want)
	}
	if got, want := db.ReadEvents(t, 0, 100), testdb.Span(7, 10); !slices.Equal(got, want) {
		t.Errorf("read_events(0) = %v, want %v", got, want)
	}
	if got := db.ReadEvents(t, 10, 100); len(got) != 0 {
		t.Errorf("read_events(10) = %v, want nothing while 11 is unproven", got)
	}
	if err := wtx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := db.ReadEvents(t, 10, 100), []int64{11, 12}; !slices.Equal(got, want) {
		t.Errorf("read_events(10) after the commit = %v, want %v", got, want)
	}
}

// read_events' arguments: a NULL or negative position reads from the
// start, max bounds the answer (NULL or 0: nothing), and never above
// MaxRead.
func TestReadEventsArguments(t *testing.T) {
	t.Parallel()
	db, ob := newScene(t)
	publishCommitted(t, ob, 5)
	for _, c := range []struct {
		call string
		want int
	}{
		{`read_events(NULL, 10)`, 5},
		{`read_events(-3, 10)`, 5},
		{`read_events(0, 2)`, 2},
		{`read_events(0, 0)`, 0},
		{`read_events(0, NULL)`, 0},
		{`read_events(after => 3, max => 10)`, 2},
	} {
		t.Run(c.call, func(t *testing.T) {
			if n := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.`+c.call); n != c.want {
				t.Errorf("%s = %d, want %d", c.call, n, c.want)
			}
		})
	}
	db.Exec(t, `SELECT setval('outbox.events_sequence_seq', 20000)`)
	db.Exec(t, `INSERT INTO outbox.events (sequence, xid, topic, payload) SELECT g, '5', 't', '{}' FROM generate_series(6, 20000) g`)
	if n := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.read_events(0, 50000)`); n != outbox.MaxRead {
		t.Errorf("read_events(0, 50000) returned %d rows, want the cap %d", n, outbox.MaxRead)
	}
}

// commit_position registers a consumer, never moves it backwards, and
// refuses a position above the allocation head or below 0.
func TestCommitPositionOnlyMovesForward(t *testing.T) {
	t.Parallel()
	db, ob := newScene(t)
	ctx := context.Background()
	publishCommitted(t, ob, 10)
	commit := func(name string, p int64) (int64, error) {
		var stored int64
		err := db.Pool.QueryRow(ctx, `SELECT outbox.commit_position($1, $2)`, name, p).Scan(&stored)
		return stored, err
	}
	if got, err := commit("ledger", 7); err != nil || got != 7 {
		t.Fatalf("first commit = %d, %v; want 7", got, err)
	}
	if got, err := commit("ledger", 3); err != nil || got != 7 {
		t.Errorf("commit back to 3 = %d, %v; want 7 kept", got, err)
	}
	if got, err := commit("ledger", 10); err != nil || got != 10 {
		t.Errorf("commit to the head = %d, %v; want 10", got, err)
	}
	refused := []struct {
		what, name string
		position   int64
	}{
		{"commit above the head", "ledger", 11},
		{"commit of -1", "ledger", -1},
		{"commit for an empty name", "", 1},
	}
	for _, c := range refused {
		var pgErr *pgconn.PgError
		if _, err := commit(c.name, c.position); !errors.As(err, &pgErr) || pgErr.Code != "22023" {
			t.Errorf("%s: %v, want invalid_parameter_value", c.what, err)
		}
	}
	wantPosition(t, db, "ledger", 10, "after the commits")
}

// A consumer name is the consumers table's primary key: one longer than
// a btree entry can hold failed with a raw 54000 deep in the insert. It is
// bounded at 200 bytes, counted as stored, and refused like the other
// bad input (22023) with a message naming the rule.
func TestCommitPositionBoundsTheConsumerName(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	commit := func(name string) error {
		_, err := db.Pool.Exec(ctx, `SELECT outbox.commit_position($1, 0)`, name)
		return err
	}
	// 6,400 bytes that do not compress: a repeated name would fit the
	// index compressed.
	var long strings.Builder
	for sum := sha256.Sum256(nil); long.Len() < 6400; sum = sha256.Sum256(sum[:]) {
		long.WriteString(hex.EncodeToString(sum[:]))
	}
	for _, c := range []struct {
		what, name string
	}{
		{"6,400 bytes", long.String()[:6400]},
		{"201 bytes", strings.Repeat("é", 100) + "x"},
	} {
		t.Run(c.what, func(t *testing.T) {
			err := commit(c.name)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "22023" {
				t.Fatalf("a name of %s: %v, want invalid_parameter_value (22023)", c.what, err)
			}
			if !strings.Contains(pgErr.Message, "more than 200") || !strings.Contains(pgErr.Message, "bytes long") {
				t.Errorf("a name of %s: message %q does not state the bound", c.what, pgErr.Message)
			}
			if len(pgErr.Message) > 200 {
				t.Errorf("a name of %s: the message quotes it whole (%d bytes)", c.what, len(pgErr.Message))
			}
		})
	}
	if err := commit(strings.Repeat("é", 100)); err != nil {
		t.Errorf("a name of exactly 200 bytes: %v", err)
	}
}

// The Go consumer refuses a name commit_position would refuse before it
// sends anything, saying why.
func TestConsumeRefusesALongNameBeforeItSends(t *testing.T) {
	t.Parallel()
	_, ob := newScene(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := ob.Consume(ctx, outbox.ConsumerOptions{Name: strings.Repeat("n", outbox.MaxConsumerName+1)},
		func(context.Context, []outbox.Event) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "201 bytes long, more than 200") {
		t.Fatalf("Consume with a 201-byte name: %v, want a refusal stating the bound", err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		t.Errorf("the refusal came from the server (%v): the name was sent", err)
	}
}

// listen opens a connection LISTENing on the outbox's events channel.
func listen(t *testing.T, db *testdb.DB) *pgx.Conn {
	t.Helper()
	conn := db.Connect(t)
	testdb.Exec(t, conn, `LISTEN outbox_events`)
	return conn
}

// notifications collects what arrives on conn until quiet for `quiet`.
func notifications(t *testing.T, conn *pgx.Conn, quiet time.Duration) []string {
	t.Helper()
	var got []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			return got
		}
		got = append(got, n.Payload)
	}
}

// One notification per committing transaction that published, however
// many publish calls it made, with the range of its sequences, and none
// for a rollback; a savepoint rolled back takes its part with it.
func TestPublishNotifiesOncePerCommittingTransaction(t *testing.T) {
	t.Parallel()
	db, ob := newScene(t)
	ctx := context.Background()
	conn := listen(t, db)
	db.Exec(t, `SELECT outbox.set_publish_notifications(true)`)

	// Three publish calls, four events, one transaction: 1..4.
	if err := ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
		for _, n := range []int{1, 2, 1} {
			payloads := make([]any, n)
			for i := range payloads {
				payloads[i] = i
			}
			if _, err := tx.Publish(ctx, "t", payloads...); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Rolled back: 5.
	_ = ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
		_, _ = tx.Publish(ctx, "t", 1)
		return errors.New("no")
	})
	// A savepoint rolled back first (6), then 7 commits.
	if err := ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
		_ = tx.Savepoint(ctx, func(ctx context.Context, tx *outbox.Tx) error {
			_, _ = tx.Publish(ctx, "t", 1)
			return errors.New("undo")
		})
		_, err := tx.Publish(ctx, "t", 2)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// 8 commits, then a savepoint's 9 rolls back: the range is 8..8.
	if err := ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
		if _, err := tx.Publish(ctx, "t", 1); err != nil {
			return err
		}
		_ = tx.Savepoint(ctx, func(ctx context.Context, tx *outbox.Tx) error {
			_, _ = tx.Publish(ctx, "t", 1)
			return errors.New("undo")
		})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A transaction opted out: 10, no notification.
	if err := ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL "outboxkeeper.outbox_events_min" = 'off'`); err != nil {
			return err
		}
		_, err := tx.Publish(ctx, "t", 1)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	got := notifications(t, conn, time.Second)
	want := []string{`{"min":1,"max":4}`, `{"min":7,"max":7}`, `{"min":8,"max":8}`}
	if !slices.Equal(got, want) {
		t.Errorf("notifications = %q, want %q", got, want)
	}
}

// Until switched on, publishing notifies nothing (it costs every
// publisher), and switched off again it stops.
func TestPublishNotificationsAreOffUntilSwitchedOn(t *testing.T) {
	t.Parallel()
	db, ob := newScene(t)
	conn := listen(t, db)
	publishCommitted(t, ob, 1)
	if got := notifications(t, conn, 500*time.Millisecond); len(got) != 0 {
		t.Errorf("notifications by default = %q, want none", got)
	}
	db.Exec(t, `SELECT outbox.set_publish_notifications(true)`)
	publishCommitted(t, ob, 1)
	if got := notifications(t, conn, 500*time.Millisecond); !slices.Equal(got, []string{`{"min":2,"max":2}`}) {
		t.Errorf("notifications when on = %q, want one for 2", got)
	}
	db.Exec(t, `SELECT outbox.set_publish_notifications(false)`)
	publishCommitted(t, ob, 1)
	if got := notifications(t, conn, 500*time.Millisecond); len(got) != 0 {
		t.Errorf("notifications when off again = %q, want none", got)
	}
}

// Consume hands over the events in order, in batches, and commits the
// position of each batch's last event after the handler returns.
func TestConsumeHandsBatchesInOrderAndCommitsAfter(t *testing.T) {
	t.Parallel()
	db, ob := newScene(t)
	publishCommitted(t, ob, 25)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var seen []int64
	var batches []int
	done := make(chan error, 1)
	go func() {
		done <- ob.Consume(ctx, outbox.ConsumerOptions{Name: "ledger", Batch: 10, Poll: 50 * time.Millisecond},
			func(ctx context.Context, events []outbox.Event) error {
				// The position is committed only after the previous batch.
				var stored int64
				if err := db.Pool.QueryRow(ctx, `SELECT position FROM outbox.consumers WHERE name = 'ledger'`).Scan(&stored); err != nil {
					return err
				}
				if want := int64(len(seen)); stored != want {
					return fmt.Errorf("position %d while handing over after %d", stored, want)
				}
				seen = append(seen, sequencesOf(events)...)
				batches = append(batches, len(events))
				return nil
			})
	}()
	// Once the last batch is committed, stop the consumer.
	for {
		var stored int64
		_ = db.Pool.QueryRow(ctx, `SELECT position FROM outbox.consumers WHERE name = 'ledger'`).Scan(&stored)
		if stored == 25 || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Consume = %v, want context.Canceled", err)
	}
	if !slices.Equal(seen, testdb.Span(1, 25)) {
		t.Errorf("events handed over = %v, want 1..25 in order", seen)
	}
	if !slices.Equal(batches, []int{10, 10, 5}) {
		t.Errorf("batch sizes = %v, want [10 10 5]", batches)
	}
	wantPosition(t, db, "ledger", 25, "after the run")
}

// A handler's failure stops the consumer and leaves the position where it
// was, so the batch is handed over again next time (at-least-once).
func TestConsumeLeavesThePositionWhenHandlingFails(t *testing.T) {
	t.Parallel()
	db, ob := newScene(t)
	publishCommitted(t, ob, 5)
	boom := errors.New("boom")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := ob.Consume(ctx, outbox.ConsumerOptions{Name: "ledger", Start: 2},
		func(ctx context.Context, events []outbox.Event) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Consume = %v, want the handler's error", err)
	}
	wantPosition(t, db, "ledger", 2, "after the failed handler (the start)")
}

// With a listener, an idle consumer wakes on the commit's notification,
// not at its poll (a minute here, so only the notification can wake it
// within the test).
func TestConsumeWakesOnTheNotification(t *testing.T) {
	t.Parallel()
	db, ob := newScene(t)
	db.Exec(t, `SELECT outbox.set_publish_notifications(true)`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan []int64, 4)
	done := make(chan error, 1)
	go func() {
		done <- ob.Consume(ctx, outbox.ConsumerOptions{
			Name: "ledger", Poll: time.Minute,
			// LISTEN is session state: dial the server itself, never a
			// transaction-mode pooler (see ConsumerOptions.Listen).
			Listen: func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, db.DirectURL) },
		}, func(ctx context.Context, events []outbox.Event) error {
			got <- sequencesOf(events)
			return nil
		})
	}()
	// Let the consumer register, read nothing and wait.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'ClientRead' AND query LIKE 'LISTEN%'`).Scan(&n)
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the consumer never started listening")
		}
		time.Sleep(20 * time.Millisecond)
	}
	published := time.Now()
	publishCommitted(t, ob, 2)
	select {
	case seqs := <-got:
		if !slices.Equal(seqs, []int64{1, 2}) {
			t.Errorf("handed over %v, want [1 2]", seqs)
		}
		t.Logf("woken %s after the commit", time.Since(published).Round(time.Millisecond))
	case err := <-done:
		t.Fatalf("Consume ended: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("the consumer did not wake within 15s of the commit (its poll is a minute)")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Consume = %v, want context.Canceled", err)
	}
}

// Publish takes headers as an outbox.Headers argument, for every event of
// the call.
func TestPublishHeaders(t *testing.T) {
	t.Parallel()
	_, ob := newScene(t)
	err := ob.InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
		_, err := tx.Publish(ctx, "t", map[string]int{"a": 1}, outbox.Headers{"trace_id": "abc"}, map[string]int{"a": 2})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ob.ReadContiguous(context.Background(), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("read %d events, want 2", len(got))
	}
	for _, e := range got {
		var h map[string]string
		if err := json.Unmarshal(e.Headers, &h); err != nil || h["trace_id"] != "abc" {
			t.Errorf("event %d headers %s, want trace_id abc", e.Sequence, e.Headers)
		}
	}
	err = ob.InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
		_, err := tx.Publish(ctx, "t", 1, outbox.Headers{"a": 1}, outbox.Headers{"b": 2})
		return err
	})
	if err == nil {
		t.Error("two Headers in one call accepted")
	}
}

// InTx takes pgx.TxOptions.
func TestInTxTakesTxOptions(t *testing.T) {
	t.Parallel()
	_, ob := newScene(t)
	var level string
	err := ob.InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
		return tx.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&level)
	}, pgx.TxOptions{IsoLevel: pgx.Serializable})
	if err != nil {
		t.Fatal(err)
	}
	if level != "serializable" {
		t.Errorf("isolation = %q, want serializable", level)
	}
	err = ob.InTx(context.Background(), func(ctx context.Context, tx *outbox.Tx) error {
		_, err := tx.Publish(ctx, "t", 1)
		return err
	}, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Errorf("publish in a read-only transaction: %v, want read_only_sql_transaction", err)
	}
}

// A transaction the application began itself, handed to Wrap: its XID is
// the one stored in the rows, and a rollback reports its sequences with
// it; after a commit, Rollback is a no-op that reports nothing.
func TestWrapReportsARollbackWithTheXID(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	reporter, received := sqsReporter(t, 0)
	ob := newOutbox(t, db, outbox.Options{Reporter: reporter})

	ptx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	tx := ob.Wrap(ptx)
	if _, ok := tx.XID(); ok {
		t.Error("XID known before anything was published")
	}
	seqs, err := tx.Publish(ctx, "t", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	xid, ok := tx.XID()
	if !ok {
		t.Fatal("XID unknown after Publish")
	}
	inTx := testdb.Scalar[string](t, tx, `SELECT pg_current_xact_id()::text`)
	if strconv.FormatUint(xid, 10) != inTx {
		t.Errorf("XID() = %d, pg_current_xact_id() = %s", xid, inTx)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	got := received(1)
	if len(got) != 1 || !got[0].HasXID || got[0].XID != xid || !slices.Equal(got[0].Sequences, seqs) {
		t.Fatalf("reports = %+v, want one with xid %d and %v", got, xid, seqs)
	}

	ptx, err = db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx = ob.Wrap(ptx)
	if _, err := tx.Publish(ctx, "t", 3); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("Rollback after Commit = %v, want pgx.ErrTxClosed", err)
	}
	wantNoReport(t, received)
}

// database/sql code that keeps its own statements, without the library:
// publish with the SQL function, take the xid inside the transaction,
// report a rollback with it, consume with read_events and commit_position.
func TestDatabaseSQLRecipe(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	reporter, received := sqsReporter(t, 0)
	sqldb, err := sql.Open("pgx", db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()

	tx, err := sqldb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var seq int64
	if err := tx.QueryRowContext(ctx, `SELECT outbox.publish($1, $2::jsonb)`, "order.placed", `{"id":1}`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	var xid string // pg_current_xact_id() inside the transaction, as text
	if err := tx.QueryRowContext(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	x, err := strconv.ParseUint(xid, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := reporter.Report(ctx, report.Report{XID: x, HasXID: true, Sequences: []int64{seq}}); err != nil {
		t.Fatal(err)
	}
	if got := received(1); len(got) != 1 || got[0].XID != x || !slices.Equal(got[0].Sequences, []int64{seq}) {
		t.Errorf("report = %+v, want xid %d, sequences [%d]", got, x, seq)
	}

	if _, err := sqldb.ExecContext(ctx, `SELECT outbox.publish('order.placed', '{"id":2}')`); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `INSERT INTO outbox.events (sequence, filled_by) VALUES ($1, 'compensate')`, seq)
	rows, err := sqldb.QueryContext(ctx, `SELECT sequence, filled_by IS NOT NULL FROM outbox.read_events($1, $2)`, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var read []int64
	var placeholders int
	for rows.Next() {
		var s int64
		var placeholder bool
		if err := rows.Scan(&s, &placeholder); err != nil {
			t.Fatal(err)
		}
		read = append(read, s)
		if placeholder {
			placeholders++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(read, []int64{1, 2}) || placeholders != 1 {
		t.Errorf("read %v with %d placeholders, want [1 2] with 1", read, placeholders)
	}
	var stored int64
	if err := sqldb.QueryRowContext(ctx, `SELECT outbox.commit_position($1, $2)`, "orders", 2).Scan(&stored); err != nil || stored != 2 {
		t.Errorf("commit_position = %d, %v; want 2", stored, err)
	}
}

// wantPosition checks the consumer's position as the consumers table
// holds it; when says at which point of the test.
func wantPosition(t *testing.T, db *testdb.DB, name string, want int64, when string) {
	t.Helper()
	if got := testdb.Scalar[int64](t, db.Pool, `SELECT position FROM outbox.consumers WHERE name = $1`, name); got != want {
		t.Errorf("%s: %s's stored position = %d, want %d", when, name, got, want)
	}
}
