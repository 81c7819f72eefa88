package fill

import (
	"context"
	"fmt"

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

// proofSQL is the proof and the list of blockers (proof.sql).
type proofSQL struct {
	check    string
	blockers string
}

// queryStart is how much of a blocker's statement is shown.
const queryStart = 120

func newProofSQL() proofSQL {
	// proof.sql reads no table: nothing in it is templated.
	return proofSQL{check: proofFile.Statement("check", ""), blockers: proofFile.Statement("blockers", "")}
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
	rows, err := q.Query(ctx, p.blockers, pgx.NamedArgs{"marker": marker, "query_start": queryStart, "max_blockers": MaxBlockers})
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

// NextXID is the first transaction id not yet assigned, read without
// assigning one: as a marker for Blockers it names every session that
// holds an xid or a snapshot now, so every writer of any sequence
// allocated so far.
func NextXID(ctx context.Context, q store.Querier) (uint64, error) {
	var x uint64
	if err := q.QueryRow(ctx, proofFile.Statement("next_xid", "")).Scan(&x); err != nil {
		return 0, fmt.Errorf("read the next xid: %w", err)
	}
	return x, nil
}
