package fill

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// State is fill_state: what a resident gap filler would keep in memory
// between ticks. Every statement on the table is in fill_state.sql.
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

// Cycle is the persisted unit of work: the whole range its marker can
// prove, not one page.
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

// LeaseName is the fill's lease in <schema>.leases.
const LeaseName = "fill"

//go:embed fill_state.sql proof.sql
var sqlFiles embed.FS

var (
	stateFile = sqltext.MustParse(sqlFiles, "fill_state.sql")
	proofFile = sqltext.MustParse(sqlFiles, "proof.sql")
)

// stateArgs are the named arguments of fill_state.sql's save.
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

// markerArgs are the named arguments of fill_state.sql's assign_marker.
func markerArgs(c Cycle, head int64) pgx.NamedArgs {
	return pgx.NamedArgs{
		"cycle_from":          c.From,
		"cycle_first_seen_at": c.FirstSeenAt,
		"cycle_historical":    c.Historical,
		"marker_head":         head,
	}
}

// scanState reads the state's columns, after whatever columns come first
// (first).
func scanState(row pgx.Row, first ...any) (State, error) {
	var (
		st           State
		from, mhead  *int64
		firstSeen    *time.Time
		historical   bool
		marker       *uint64
		blockedSince *time.Time
	)
	dest := append(first, &st.Started, &st.Watermark, &st.HistoricalHead,
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

// errNoState is fill_state without its row.
var errNoState = errors.New("fill_state has no row: run the migrations")

// stateSQL is the fill's statements on its state, each riding on the
// lease statement it needs.
type stateSQL struct {
	load, checkpoint, renew, handOver, finish, marker pass.Ride
}

func newStateSQL(l *pass.Lease, schema string) stateSQL {
	save := stateFile.Statement("save", schema)
	return stateSQL{
		load:       l.Ride(pass.StepAcquire, stateFile.Statement("load", schema)),
		checkpoint: l.Ride(pass.StepRenew, save),
		renew:      l.Ride(pass.StepRenew, ""),
		handOver:   l.Ride(pass.StepHandOver, save),
		finish:     l.Ride(pass.StepFinish, save),
		marker:     l.Ride(pass.StepRenew, stateFile.Statement("assign_marker", schema)),
	}
}

// loadInto reads the state the lease statement loaded into st.
func loadInto(st *State) pass.Reader {
	return func(row pgx.Row, lease ...any) error {
		got, err := scanState(row, lease...)
		if errors.Is(err, pgx.ErrNoRows) {
			return errNoState
		}
		if err == nil {
			*st = got
		}
		return err
	}
}

// scanned is a Reader that scans the rider's one column into v (nil: skip
// it).
func scanned(v any) pass.Reader {
	return func(row pgx.Row, lease ...any) error { return row.Scan(append(lease, v)...) }
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
	// UpdatedAt is the last time a pass wrote the row: every checkpoint
	// that changed the state, every hand-over (about once a minute while
	// passes watch) and the end of every pass.
	UpdatedAt time.Time
}

// ReadStatus reads the fill's state, the lease and the head.
func ReadStatus(ctx context.Context, q store.Querier, schema store.Schema) (Status, error) {
	var s Status
	st, err := scanState(q.QueryRow(ctx, stateFile.Statement("status", schema.Name()), pgx.NamedArgs{"lease": LeaseName}),
		&s.Head, &s.Now, &s.LeaseHeld, &s.LeaseExpiresAt, &s.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Status{}, fmt.Errorf("fill: %w", errNoState)
	}
	if err != nil {
		return Status{}, fmt.Errorf("read fill state: %w", err)
	}
	s.State = st
	return s, nil
}
