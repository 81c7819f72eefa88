package fill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// State is the fill_state row minus the lease: what a resident gap filler
// would keep in memory between ticks. The lease columns of the same row
// are in lease.go; every statement on the table is in one of the two files.
type State struct {
	// Started is false until the first pass anchored the watermark at 0.
	Started bool
	// Watermark: every sequence up to it is present or proven never to be
	// written (§3.3). Only ever raised.
	Watermark int64
	// HistoricalHead is the head the first run read: a gap at or below it
	// was there before the fill, and needs no grace.
	HistoricalHead int64
	// Cycle is the stall being worked, nil when caught up.
	Cycle *Cycle
	// ProofBlockedSince is when the current marker's proof was first seen
	// not passing.
	ProofBlockedSince *time.Time
}

// Cycle is the persisted unit of work: the reference's StallEpisode, but
// covering the whole range its marker can prove, not one page.
type Cycle struct {
	// From is the watermark when the stall was first seen: From+1 was
	// missing.
	From int64
	// FirstSeenAt is when a pass first saw the stall; the grace counts from
	// it across passes.
	FirstSeenAt time.Time
	// Historical: the stall lies at or below State.HistoricalHead.
	Historical bool
	// Marker is the abandonment marker xid, nil until the grace is over.
	Marker *uint64
	// MarkerHead is the allocation head read strictly before Marker was
	// assigned (§3.2): the proof covers sequences up to it and no further.
	MarkerHead int64
}

// errLeaseLost: a checkpoint found another pass owning the lease (ours
// expired while a statement was blocked, or the pass was cut off).
var errLeaseLost = errors.New("fill: lease lost to another pass")

// stateColumns is how every statement that loads the state reads it.
const stateColumns = `started, watermark, historical_head,
	cycle_from, cycle_first_seen_at, cycle_historical, cycle_marker, cycle_marker_head,
	proof_blocked_since`

// stateSet writes the state back; shared by the checkpoint and the finish.
const stateSet = `started = @started,
	watermark = GREATEST(watermark, @watermark),
	historical_head = @historical_head,
	cycle_from = @cycle_from,
	cycle_first_seen_at = @cycle_first_seen_at,
	cycle_historical = @cycle_historical,
	cycle_marker = @cycle_marker,
	cycle_marker_head = @cycle_marker_head,
	proof_blocked_since = @proof_blocked_since,
	updated_at = now()`

// stateSQL is the statements that write the state.
type stateSQL struct {
	checkpoint string
	takeMarker string
}

func newStateSQL(schema store.Schema) stateSQL {
	t := schema.Table("fill_state")
	return stateSQL{
		// Progress and a lease renewal in one statement, only while the
		// lease is ours (a renewal also tells a predecessor that handed the
		// lease over that its successor acts as owner). It also says
		// whether a successor waits, which is the holder's cue to hand
		// over (lease.go).
		checkpoint: `UPDATE ` + t + ` SET ` + stateSet + `,
				lease_expires_at = now() + @lease_ms::bigint * interval '1 millisecond',
				` + acknowledged + `
			WHERE singleton AND lease_owner = @owner
			RETURNING watermark, ` + successorWaiting,
		// The marker is assigned *here*, by pg_current_xact_id() in this
		// UPDATE, so it is always a later statement than the head read it
		// pairs with (§3.2), and it is persisted in the same breath: a
		// crash cannot leave a marker the next pass does not know. The xid
		// is this autocommit statement's own; it commits at once, which is
		// all a horizon needs.
		takeMarker: `UPDATE ` + t + ` SET
				cycle_from = @cycle_from,
				cycle_first_seen_at = @cycle_first_seen_at,
				cycle_historical = @cycle_historical,
				cycle_marker = pg_current_xact_id(),
				cycle_marker_head = @marker_head,
				proof_blocked_since = NULL,
				lease_expires_at = now() + @lease_ms::bigint * interval '1 millisecond',
				` + acknowledged + `,
				updated_at = now()
			WHERE singleton AND lease_owner = @owner
			RETURNING cycle_marker`,
	}
}

// stateArgs are the named arguments of stateSet.
func stateArgs(st State) pgx.NamedArgs {
	args := pgx.NamedArgs{
		"started":             st.Started,
		"watermark":           st.Watermark,
		"historical_head":     st.HistoricalHead,
		"cycle_from":          nil,
		"cycle_first_seen_at": nil,
		"cycle_historical":    false,
		"cycle_marker":        nil,
		"cycle_marker_head":   nil,
		"proof_blocked_since": st.ProofBlockedSince,
	}
	if c := st.Cycle; c != nil {
		args["cycle_from"], args["cycle_first_seen_at"], args["cycle_historical"] = c.From, c.FirstSeenAt, c.Historical
		if c.Marker != nil {
			args["cycle_marker"], args["cycle_marker_head"] = *c.Marker, c.MarkerHead
		}
	}
	return args
}

// scanState reads stateColumns, after whatever columns come first (extra).
func scanState(row pgx.Row, extra ...any) (State, error) {
	var (
		st           State
		from, mhead  *int64
		firstSeen    *time.Time
		historical   bool
		marker       *uint64
		blockedSince *time.Time
	)
	dest := append(extra, &st.Started, &st.Watermark, &st.HistoricalHead,
		&from, &firstSeen, &historical, &marker, &mhead, &blockedSince)
	if err := row.Scan(dest...); err != nil {
		return State{}, err
	}
	st.ProofBlockedSince = blockedSince
	if from != nil && firstSeen != nil {
		c := &Cycle{From: *from, FirstSeenAt: *firstSeen, Historical: historical, Marker: marker}
		if marker != nil && mhead != nil {
			c.MarkerHead = *mhead
		}
		st.Cycle = c
	}
	return st, nil
}

// checkpoint writes st and renews the lease; it returns the watermark as
// stored (GREATEST keeps a late save from moving it back) and whether a
// successor waits for the lease.
func (s stateSQL) checkpointState(ctx context.Context, q store.Querier, owner string, st State, lease time.Duration) (int64, bool, error) {
	args := stateArgs(st)
	args["owner"], args["lease_ms"] = owner, lease.Milliseconds()
	var w int64
	var successor bool
	err := q.QueryRow(ctx, s.checkpoint, args).Scan(&w, &successor)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, errLeaseLost
	}
	if err != nil {
		return 0, false, fmt.Errorf("save fill state: %w", err)
	}
	return w, successor, nil
}

// assignMarker persists c with a fresh marker xid paired with head, and
// returns the marker.
func (s stateSQL) assignMarker(ctx context.Context, q store.Querier, owner string, c Cycle, head int64, lease time.Duration) (uint64, error) {
	var m uint64
	err := q.QueryRow(ctx, s.takeMarker, pgx.NamedArgs{
		"owner":               owner,
		"cycle_from":          c.From,
		"cycle_first_seen_at": c.FirstSeenAt,
		"cycle_historical":    c.Historical,
		"marker_head":         head,
		"lease_ms":            lease.Milliseconds(),
	}).Scan(&m)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, errLeaseLost
	}
	if err != nil {
		return 0, fmt.Errorf("take abandonment marker: %w", err)
	}
	return m, nil
}

// Status is fill_state as an operator sees it (outboxkeeper status): the
// state, whether a pass holds the lease now, when a pass last wrote the
// row, and the allocation head, all read in one statement.
type Status struct {
	State
	Head int64
	// Now is the database clock when it was read.
	Now time.Time
	// LeaseHeld: a pass holds an unexpired lease, so one is running.
	LeaseHeld      bool
	LeaseExpiresAt *time.Time
	// UpdatedAt is the last time a pass wrote the row (every lease
	// renewal, at least every few seconds while one runs, and the end of
	// every pass).
	UpdatedAt time.Time
}

// readStatusSQL reads nothing a pass writes under a lock it waits on: a
// plain read of the one row.
func readStatusSQL(schema store.Schema) string {
	return `SELECT ` + schema.Table("allocation_head") + `(), now(),
			coalesce(lease_owner IS NOT NULL AND lease_expires_at > now(), false), lease_expires_at, updated_at, ` + stateColumns + `
		FROM ` + schema.Table("fill_state") + ` WHERE singleton`
}

// ReadStatus reads the fill's state, the lease and the head.
func ReadStatus(ctx context.Context, q store.Querier, schema store.Schema) (Status, error) {
	var s Status
	st, err := scanState(q.QueryRow(ctx, readStatusSQL(schema)), &s.Head, &s.Now, &s.LeaseHeld, &s.LeaseExpiresAt, &s.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Status{}, errors.New("fill: fill_state has no row: run the migrations")
	}
	if err != nil {
		return Status{}, fmt.Errorf("read fill state: %w", err)
	}
	s.State = st
	return s, nil
}
