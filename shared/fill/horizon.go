package fill

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/shared/store"
)

// horizonSQL is the abandonment proof (§3.3) and its diagnosis. It reads
// only the server's transaction state, no table.
type horizonSQL struct {
	passed   string
	blockers string
}

func newHorizonSQL() horizonSQL {
	// The marker as a 32-bit xid, for comparing with pg_stat_activity's
	// xid columns: xid has no ordering, but age() (transactions since)
	// does. xid8::xid (PostgreSQL 13+) drops the epoch.
	const marker32 = `($1::text::xid8::xid)`
	return horizonSQL{
		// The oldest transaction still running, from a fresh snapshot of
		// this autocommit statement (which has no xid of its own): newer
		// than the marker means every transaction older than the marker —
		// every writer of a sequence at or below the marker head — ended.
		passed: `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::text::xid8`,
		// The sessions holding the horizon back: an xid (or a snapshot)
		// at least as old as the marker. Oldest first, xid holders (the
		// ones the proof actually waits on) before snapshot holders. Other
		// roles' state and xact_start need pg_read_all_stats; pid,
		// application_name and the xid columns are visible to everyone, so
		// the xid age always names them.
		blockers: `SELECT pid, state, xact_age_s, xid_age, application_name, backend_xid, backend_xmin FROM (
				SELECT pid, coalesce(state, '') AS state,
					extract(epoch FROM now() - xact_start)::float8 AS xact_age_s,
					greatest(coalesce(age(backend_xid), 0), coalesce(age(backend_xmin), 0))::bigint AS xid_age,
					coalesce(application_name, '') AS application_name,
					coalesce(backend_xid::text, '') AS backend_xid, coalesce(backend_xmin::text, '') AS backend_xmin
				FROM pg_stat_activity
				WHERE pid <> pg_backend_pid()
				  AND (age(backend_xid) >= age(` + marker32 + `) OR age(backend_xmin) >= age(` + marker32 + `))
				UNION ALL
				-- A prepared (two-phase) transaction holds the horizon
				-- with no backend at all, so pg_stat_activity never shows
				-- it; name it by its gid (pid 0) or the operator is left
				-- with an alarm and an empty list.
				SELECT 0, 'prepared transaction ' || gid || ' (owner ' || owner || ', database ' || database || ')',
					extract(epoch FROM now() - prepared)::float8,
					age(transaction)::bigint, '', transaction::text, ''
				FROM pg_prepared_xacts
				WHERE age(transaction) >= age(` + marker32 + `)
			) holders
			ORDER BY backend_xid = '', xid_age DESC
			LIMIT ` + strconv.Itoa(MaxBlockers),
	}
}

func (h horizonSQL) proofPassed(ctx context.Context, q store.Querier, marker uint64) (bool, error) {
	var ok bool
	if err := q.QueryRow(ctx, h.passed, strconv.FormatUint(marker, 10)).Scan(&ok); err != nil {
		return false, fmt.Errorf("abandonment proof for marker %d: %w", marker, err)
	}
	return ok, nil
}

func (h horizonSQL) listBlockers(ctx context.Context, q store.Querier, marker uint64) ([]Blocker, error) {
	rows, err := q.Query(ctx, h.blockers, strconv.FormatUint(marker, 10))
	if err != nil {
		return nil, fmt.Errorf("sessions holding marker %d: %w", marker, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Blocker, error) {
		var b Blocker
		err := row.Scan(&b.PID, &b.State, &b.XactAgeSeconds, &b.XIDAge, &b.ApplicationName, &b.BackendXID, &b.BackendXmin)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("sessions holding marker %d: %w", marker, err)
	}
	if out == nil {
		out = []Blocker{}
	}
	return out, nil
}
