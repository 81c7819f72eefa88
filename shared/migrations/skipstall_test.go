package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/passtest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
)

// skipScene is a test database whose fill watermark is anchored at 1 (one
// committed event, one pass), with sequence 2 burned by a rolled-back
// writer and 3 committed: a stall at 2 the fill has not seen yet.
func skipScene(t *testing.T) (*testdb.DB, context.Context) {
	t.Helper()
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	db.Exec(t, `SELECT outbox.publish('t', '{}')`)
	if res, err := passtest.Fill(t, db.Pool, 5*time.Second).RunOnce(ctx, nil); err != nil || res.Watermark != 1 {
		t.Fatalf("anchoring pass: %v, %v", res, err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	testdb.Exec(t, tx, `SELECT outbox.publish('t', '{}')`)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `SELECT outbox.publish('t', '{}')`)
	return db, ctx
}

func filledBy(t *testing.T, db *testdb.DB, seq int64) string {
	t.Helper()
	return testdb.Scalar[string](t, db.Pool, `SELECT coalesce((SELECT coalesce(filled_by, 'event') FROM outbox.events WHERE sequence = $1), 'missing')`, seq)
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// A person on call, set up with grant_operator, reads the functions'
// state and the deliveries' bookkeeping, retries dead rows and skips a
// stall through skip_stall; nothing else: no payload, no event, no
// position, no direct write to the record.
func TestOperatorRole(t *testing.T) {
	t.Parallel()
	db, ctx := skipScene(t)
	op := db.Operator(t)
	dead := testdb.Scalar[int64](t, db.Pool, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, redeliveries, delivered_at, dead_at)
		VALUES ('r', 'k', 'secret', 'dead', 11, 10, now() - interval '1 hour', now()) RETURNING id`)
	schema := store.MustSchema("outbox")

	if _, err := fill.ReadStatus(ctx, op.Pool, schema); err != nil {
		t.Errorf("read the fill's status: %v", err)
	}
	admin := store.NewDeliveryAdmin(schema)
	if _, err := admin.Counts(ctx, op.Pool, time.Minute); err != nil {
		t.Errorf("count deliveries: %v", err)
	}
	if rows, err := admin.ListDead(ctx, op.Pool, 0, 10); err != nil || len(rows) != 1 {
		t.Errorf("list dead deliveries: %v, %v", rows, err)
	}
	if out, err := admin.RetryIDs(ctx, op.Pool, []int64{dead}); err != nil || len(out) != 1 || !out[0].Reset {
		t.Errorf("retry a dead delivery: %v, %v", out, err)
	}
	skip, err := store.NewSkips(schema).Skip(ctx, op.Pool, store.SkipParams{To: 3, Reason: "test", Operator: "alice"})
	if err != nil {
		t.Fatalf("skip_stall as the operator: %v", err)
	}
	if skip.DBUser != op.Name {
		t.Errorf("the record's db_user = %q, want the operator's login %q", skip.DBUser, op.Name)
	}

	refuses(t, op.Pool, "read a delivery's payload", `SELECT payload FROM outbox.deliveries`)
	refuses(t, op.Pool, "read events", `SELECT count(*) FROM outbox.events`)
	refuses(t, op.Pool, "insert a placeholder directly", `INSERT INTO outbox.events (sequence, filled_by) VALUES (3, 'operator')`)
	refuses(t, op.Pool, "write the record directly", `INSERT INTO outbox.stall_skips (db_user, operator, reason, from_watermark, to_sequence, head, written)
		VALUES ('x', 'x', 'x', 0, 1, 1, 0)`)
	refuses(t, op.Pool, "rewrite the record", `UPDATE outbox.stall_skips SET reason = 'nothing happened'`)
	refuses(t, op.Pool, "delete deliveries", `DELETE FROM outbox.deliveries`)
	refuses(t, op.Pool, "move a consumer", `SELECT outbox.commit_position('ledger', 0)`)
	refuses(t, op.Pool, "nextval", `SELECT nextval('outbox.events_sequence_seq')`)
}

// The functions' role writes only what it proved or was told: it cannot
// skip a stall.
func TestMaintainerCannotSkipAStall(t *testing.T) {
	t.Parallel()
	db, ctx := skipScene(t)
	m := db.Maintainer(t)
	_, err := store.NewSkips(store.MustSchema("outbox")).Skip(ctx, m.Pool, store.SkipParams{To: 3, Reason: "test", Operator: "fn"})
	refused(t, "skip_stall as the maintainer", err)
	if got := filledBy(t, db, 2); got != "missing" {
		t.Errorf("sequence 2 is %s after a refused skip, want missing", got)
	}
}

// A skip writes an operator placeholder for each missing sequence of
// (watermark, to], nothing for a present one, and records who, when, why
// and what it wrote.
func TestSkipStallWritesTheMissingAndRecordsIt(t *testing.T) {
	t.Parallel()
	db, ctx := skipScene(t)
	skip, err := store.NewSkips(store.MustSchema("outbox")).Skip(ctx, db.Pool, store.SkipParams{To: 3, Reason: "  INC-7: replica feedback  ", Operator: "alice@laptop", Sessions: []byte(`[{"pid":42}]`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := filledBy(t, db, 2); got != store.FilledByOperator {
		t.Errorf("sequence 2 is %s, want an operator placeholder", got)
	}
	if got := filledBy(t, db, 3); got != "event" {
		t.Errorf("sequence 3 is %s, want the committed event untouched", got)
	}
	if skip.Written != 1 {
		t.Errorf("Written = %d, want 1 (sequence 3 was present)", skip.Written)
	}
	if skip.FirstWritten == nil || *skip.FirstWritten != 2 {
		t.Errorf("FirstWritten = %v, want 2", skip.FirstWritten)
	}
	if skip.FromWatermark != 1 || skip.ToSequence != 3 || skip.Head != 3 {
		t.Errorf("range (%d, %d] with head %d, want (1, 3] with head 3", skip.FromWatermark, skip.ToSequence, skip.Head)
	}
	if skip.Reason != "INC-7: replica feedback" {
		t.Errorf("Reason = %q, want it trimmed", skip.Reason)
	}
	if skip.Operator != "alice@laptop" {
		t.Errorf("Operator = %q, want alice@laptop", skip.Operator)
	}
	if !strings.Contains(string(skip.Sessions), `"pid": 42`) {
		t.Errorf("Sessions = %s, want the sessions shown kept", skip.Sessions)
	}
	if skip.ReportedAt != nil {
		t.Errorf("ReportedAt = %v, want nil until a fill pass counts it", skip.ReportedAt)
	}
}

// A running transaction that has inserted a sequence of the range and not
// committed is a live writer: the skip neither waits for it nor writes
// anything, and the writer commits as if nothing happened.
//
// Not parallel: the writer holds an xid for the 3 s of the refusal, which
// would hold back the proofs of this package's fill passes beside it.
func TestSkipStallNeverOverwritesALiveWritersRow(t *testing.T) {
	db, ctx := skipScene(t)
	writer, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(ctx) //nolint:errcheck
	held := testdb.Scalar[int64](t, writer, `SELECT outbox.publish('t', '{"live":true}')`)
	began := time.Now()
	_, err = store.NewSkips(store.MustSchema("outbox")).Skip(ctx, db.Pool, store.SkipParams{To: held, Reason: "test", Operator: "alice"})
	if sqlState(err) != "55P03" {
		t.Fatalf("skip over a live writer's uncommitted row: %v, want lock_not_available (55P03)", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("the refusal took %s, want the function's 3s lock_timeout", took)
	}
	if got := filledBy(t, db, 2); got != "missing" {
		t.Errorf("sequence 2 is %s after the failed skip, want missing (the skip is one transaction)", got)
	}
	records := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.stall_skips`)
	if records != 0 {
		t.Errorf("%d skips recorded, want none for a skip that wrote nothing", records)
	}
	if err := writer.Commit(ctx); err != nil {
		t.Fatalf("the live writer's commit: %v", err)
	}
	if got := filledBy(t, db, held); got != "event" {
		t.Errorf("sequence %d is %s, want the writer's event", held, got)
	}
}

// A writer that holds a sequence without having inserted it (nextval by a
// role granted more than grant_writer, §3.6) loses it to the skip: its
// later insert fails with a duplicate key, and nothing is overwritten.
func TestSkipStallMakesALateRawWriterFail(t *testing.T) {
	t.Parallel()
	db, ctx := skipScene(t)
	raw, err := db.Connect(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Rollback(ctx) //nolint:errcheck
	held := testdb.Scalar[int64](t, raw, `SELECT nextval('outbox.events_sequence_seq')`)
	skip, err := store.NewSkips(store.MustSchema("outbox")).Skip(ctx, db.Pool, store.SkipParams{To: held, Reason: "test", Operator: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if skip.Written != 2 {
		t.Errorf("Written = %d, want 2 (sequence 2 and the held %d)", skip.Written, held)
	}
	_, err = raw.Exec(ctx, `INSERT INTO outbox.events (sequence, xid, topic, payload) VALUES ($1, pg_current_xact_id(), 't', '{}')`, held)
	if sqlState(err) != "23505" {
		t.Errorf("the late insert of %d: %v, want a duplicate key (23505)", held, err)
	}
	if got := filledBy(t, db, held); got != store.FilledByOperator {
		t.Errorf("sequence %d is %s, want the operator placeholder kept", held, got)
	}
}

// What may not be skipped is refused with nothing written.
func TestSkipStallRefusals(t *testing.T) {
	t.Parallel()
	db, ctx := skipScene(t)
	skips := store.NewSkips(store.MustSchema("outbox"))
	for _, c := range []struct {
		name             string
		to               int64
		reason, operator string
		want             string
	}{
		{"above the allocation head", 4, "r", "a", "above the allocation head 3"},
		{"at the watermark", 1, "r", "a", "already at 1"},
		{"no reason", 3, "  ", "a", "a reason is required"},
		{"no operator", 3, "r", "", "name is required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := skips.Skip(ctx, db.Pool, store.SkipParams{To: c.to, Reason: c.reason, Operator: c.operator})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want a refusal saying %q", c.name, err, c.want)
			}
		})
	}
	db.Exec(t, `SELECT setval('outbox.events_sequence_seq', 2000000)`)
	if _, err := skips.Skip(ctx, db.Pool, store.SkipParams{To: 1_000_002, Reason: "r", Operator: "a"}); err == nil || !strings.Contains(err.Error(), "at most 1000000") {
		t.Errorf("a skip of 1000001 sequences: %v, want the cap named", err)
	}
	if got := filledBy(t, db, 2); got != "missing" {
		t.Errorf("sequence 2 is %s after the refusals, want missing", got)
	}
}

// The fill has not anchored its watermark: there is nothing to measure a
// stall from, so nothing to skip.
func TestSkipStallBeforeTheFillStarted(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	db.Exec(t, `SELECT outbox.publish('t', '{}')`)
	_, err := store.NewSkips(store.MustSchema("outbox")).Skip(context.Background(), db.Pool, store.SkipParams{To: 1, Reason: "r", Operator: "a"})
	if err == nil || !strings.Contains(err.Error(), "not anchored") {
		t.Errorf("skip before the first fill pass: %v, want a refusal", err)
	}
}

// regrant_roles renews an operator set up before a migration extended
// what grant_operator gives.
func TestRegrantRolesRenewsTheOperator(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	op := db.Operator(t)
	db.Exec(t, `REVOKE SELECT ON outbox.stall_skips FROM `+pgx.Identifier{op.Name}.Sanitize())
	n := testdb.Scalar[int](t, db.Pool, `SELECT outbox.regrant_roles()`)
	if n != 1 {
		t.Errorf("regrant_roles() = %d, want 1 (the operator)", n)
	}
	if _, err := op.Pool.Exec(ctx, `SELECT count(*) FROM outbox.stall_skips`); err != nil {
		t.Errorf("operator after regrant: %v", err)
	}
}
