package compensate

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// checkSQL reads everything a batch needs from the database in one
// statement, assigning no xid (so it holds back no one's horizon): the
// allocation head, to refuse sequences never handed out (§3.5), and the
// status of every distinct reported xid.
//
// pg_xact_status raises "transaction ID is in the future" for an xid not yet
// assigned, which would fail the whole batch for one bogus report, so it is
// only called below pg_snapshot_xmax(pg_current_snapshot()). That xmax is
// NOT the next xid to be assigned, as one might hope: PostgreSQL computes it
// as the latest *completed* xid + 1, so a writer that took its xid after the
// last commit anywhere runs with an xid at or above xmax. What xmax does
// guarantee is that no xid at or above it had finished when the snapshot was
// taken: such a writer is running or never existed, and is never fillable.
// The two are told apart by the lock every transaction holds on its own xid
// for as long as it runs (pg_locks is readable by every role): held means
// "in progress"; not held means "future" — or a writer that finished
// between the snapshot and the lock read, which the batch settles by asking
// once more (the re-check) before calling it bad input.
//
// pg_locks shows 32-bit xids, so x::xid drops the epoch: an xid 2^32 above a
// running writer's would match its lock. Running xids lie less than 2^31
// above xmax (wraparound protection keeps them far closer), so anything
// further is future whatever pg_locks says.
//
// CASE evaluates its branches in order and pg_xact_status is volatile, so
// it is never called (nor folded early) for an xid at or above xmax. A NULL
// status means the xid is older than the commit log kept: it ended long
// ago. The head and xmax come from a MATERIALIZED CTE so they are read
// once, not once per xid row.
func checkSQL(schema store.Schema) string {
	return `WITH b AS MATERIALIZED (
		SELECT ` + schema.Table("allocation_head") + `() AS head,
		       pg_snapshot_xmax(pg_current_snapshot()) AS xmax)
	SELECT b.head, b.xmax, x,
	       CASE WHEN x IS NULL THEN NULL
	            WHEN x < b.xmax THEN coalesce(pg_xact_status(x), '` + StatusTooOld + `')
	            WHEN x::text::numeric - b.xmax::text::numeric < 2147483648
	             AND EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
	                         WHERE l.locktype = 'transactionid' AND l.transactionid = x::xid AND l.granted)
	                 THEN '` + StatusInProgress + `'
	            ELSE '` + StatusFuture + `' END
	FROM b LEFT JOIN unnest($1::xid8[]) AS x ON true`
}

// check runs checkSQL for xids.
func (s *Service) check(ctx context.Context, q store.Querier, xids []uint64) (Check, error) {
	rows, err := q.Query(ctx, s.checkSQL, xids)
	if err != nil {
		return Check{}, fmt.Errorf("check writers: %w", err)
	}
	// One row per xid (or one row of NULLs for none), each carrying the
	// batch's head and xmax.
	type checkRow struct {
		Head   int64
		XMax   uint64
		XID    *uint64
		Status *string
	}
	read, err := pgx.CollectRows(rows, pgx.RowToStructByPos[checkRow])
	if err != nil {
		return Check{}, fmt.Errorf("check writers: %w", err)
	}
	c := Check{Status: map[uint64]string{}}
	for _, r := range read {
		c.Head, c.XMax = r.Head, r.XMax
		if r.XID != nil && r.Status != nil {
			c.Status[*r.XID] = *r.Status
		}
	}
	return c, nil
}
