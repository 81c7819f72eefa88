package fill

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// The abandonment proof (§3.3) and its diagnosis. Both read only the
// server's transaction state, no table, and assign no xid.

// Blocker is a session holding the horizon back past the marker.
type Blocker struct {
	PID      int32  `json:"pid"`
	Database string `json:"database"`
	User     string `json:"user"`
	State    string `json:"state"`
	// XactAgeSeconds is how long its transaction has run; null when the
	// role cannot see it (needs pg_read_all_stats for other roles).
	XactAgeSeconds *float64 `json:"xact_age_s"`
	// XIDAge is how many transactions ago its xid (or snapshot xmin) was
	// assigned: visible for every session.
	XIDAge          int64  `json:"xid_age"`
	ApplicationName string `json:"application_name"`
	// Query is the start of its current or last statement, when visible.
	Query       string `json:"query,omitempty"`
	BackendXID  string `json:"backend_xid,omitempty"`
	BackendXmin string `json:"backend_xmin,omitempty"`
}

// proofSQL is the proof and the list of blockers.
type proofSQL struct {
	check    string
	blockers string
}

// queryStart is how much of a blocker's statement is shown.
const queryStart = 120

func newProofSQL() proofSQL {
	// The marker as a 32-bit xid, for comparing with pg_stat_activity's
	// xid columns: xid has no ordering, but age() (transactions since)
	// does. xid8::xid (PostgreSQL 13+) drops the epoch.
	const marker32 = `(@marker::xid8::xid)`
	return proofSQL{
		// passed: the oldest transaction still running, from a fresh
		// snapshot of this autocommit statement (which has no xid of its
		// own), is newer than the marker, so every transaction older than
		// the marker — every writer of a sequence at or below the marker
		// head — has ended.
		// foreign (§3.7): no transaction at or above the snapshot's xmax
		// had completed when it was taken, and a marker of ours had (the
		// statement that assigned it committed). A marker at or above xmax
		// therefore is not one of this cluster's: restored from a backup,
		// copied by logical replication, or left by a blue/green
		// switch-over. Its proof would wait for ever, or pass on a lie.
		check: `SELECT pg_snapshot_xmin(s) > @marker::xid8, pg_snapshot_xmax(s) <= @marker::xid8
			FROM pg_current_snapshot() AS s`,
		// The sessions holding the horizon back: an xid (or a snapshot)
		// at least as old as the marker. Oldest first, xid holders (the
		// ones the proof actually waits on) before snapshot holders. Other
		// roles' state, query and xact_start need pg_read_all_stats; pid,
		// database, user, application_name and the xid columns are visible
		// to everyone, so the xid age always names them.
		blockers: `SELECT pid, database, usename, state, xact_age_s, xid_age, application_name, query, backend_xid, backend_xmin FROM (
				SELECT pid, coalesce(datname, '') AS database, coalesce(usename, '') AS usename,
					coalesce(state, '') AS state,
					extract(epoch FROM now() - xact_start)::float8 AS xact_age_s,
					greatest(coalesce(age(backend_xid), 0), coalesce(age(backend_xmin), 0))::bigint AS xid_age,
					coalesce(application_name, '') AS application_name,
					coalesce(left(query, ` + strconv.Itoa(queryStart) + `), '') AS query,
					coalesce(backend_xid::text, '') AS backend_xid, coalesce(backend_xmin::text, '') AS backend_xmin
				FROM pg_stat_activity
				WHERE pid <> pg_backend_pid()
				  AND (age(backend_xid) >= age(` + marker32 + `) OR age(backend_xmin) >= age(` + marker32 + `))
				UNION ALL
				-- A prepared (two-phase) transaction holds the horizon
				-- with no backend at all, so pg_stat_activity never shows
				-- it; name it by its gid (pid 0) or the operator is left
				-- with an alarm and an empty list.
				SELECT 0, database, owner, 'prepared transaction ' || gid,
					extract(epoch FROM now() - prepared)::float8,
					age(transaction)::bigint, '', '', transaction::text, ''
				FROM pg_prepared_xacts
				WHERE age(transaction) >= age(` + marker32 + `)
			) holders
			ORDER BY backend_xid = '', xid_age DESC
			LIMIT ` + strconv.Itoa(MaxBlockers),
	}
}

// proofState is what one proof check says about a marker.
type proofState int

const (
	proofBlocked proofState = iota // a transaction older than the marker still runs
	proofPassed                    // every writer of a sequence at or below the marker head has ended
	proofForeign                   // the marker is not this cluster's (§3.7)
)

func (p proofSQL) checkProof(ctx context.Context, q store.Querier, marker uint64) (proofState, error) {
	var passed, foreign bool
	if err := q.QueryRow(ctx, p.check, pgx.NamedArgs{"marker": marker}).Scan(&passed, &foreign); err != nil {
		return proofBlocked, fmt.Errorf("abandonment proof for marker %d: %w", marker, err)
	}
	switch {
	case foreign:
		return proofForeign, nil
	case passed:
		return proofPassed, nil
	}
	return proofBlocked, nil
}

func (p proofSQL) listBlockers(ctx context.Context, q store.Querier, marker uint64) ([]Blocker, error) {
	rows, err := q.Query(ctx, p.blockers, pgx.NamedArgs{"marker": marker})
	if err != nil {
		return nil, fmt.Errorf("sessions holding marker %d: %w", marker, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Blocker, error) {
		var b Blocker
		err := row.Scan(&b.PID, &b.Database, &b.User, &b.State, &b.XactAgeSeconds, &b.XIDAge,
			&b.ApplicationName, &b.Query, &b.BackendXID, &b.BackendXmin)
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

// Blockers names the sessions holding the horizon back at or before
// marker, exactly as a blocked pass's blocked_by does (the same
// statement): for the operator CLI, which shows the list the fill would.
// Every writer of a sequence allocated before marker was assigned has an
// xid older than it (§3.1), so these are also the only sessions that may
// still hold such a sequence.
func Blockers(ctx context.Context, q store.Querier, marker uint64) ([]Blocker, error) {
	return newProofSQL().listBlockers(ctx, q, marker)
}

// nextXIDSQL is the first xid not yet assigned (a fresh snapshot's xmax).
const nextXIDSQL = `SELECT pg_snapshot_xmax(pg_current_snapshot())`

// NextXID is the first transaction id not yet assigned, read without
// assigning one: as a marker for Blockers it names every session that
// holds an xid or a snapshot now, so every writer of any sequence
// allocated so far.
func NextXID(ctx context.Context, q store.Querier) (uint64, error) {
	var x uint64
	if err := q.QueryRow(ctx, nextXIDSQL).Scan(&x); err != nil {
		return 0, fmt.Errorf("read the next xid: %w", err)
	}
	return x, nil
}
