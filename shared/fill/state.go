package fill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/shared/store"
)

// State is the fill_state row (infra/sql/0003_fill_state.sql) minus the
// lease: what a resident gap filler would keep in memory between ticks.
type State struct {
	Started          bool
	Watermark        int64
	HistoricalHead   int64
	HistoricalMarker *uint64
	HistoricalProven bool
	Episode          *Episode
	// ProofBlockedSince is when a proof was first seen not passing.
	ProofBlockedSince *time.Time
}

// Episode is the persisted stall episode (the reference's StallEpisode).
type Episode struct {
	// From is the watermark the stall was seen at; W+1 is missing.
	From int64
	// FirstSeenAt is when the first pass saw the stall; the grace counts
	// from it across passes.
	FirstSeenAt time.Time
	// Marker is the abandonment marker xid, nil while the grace runs.
	Marker *uint64
	// MarkerHead is the allocation head read strictly before Marker was
	// assigned (§3.2): the proof covers sequences up to it and no further.
	MarkerHead int64
}

// assign says which marker, if any, a save assigns with pg_current_xact_id().
type assign int

const (
	assignNone assign = iota
	assignEpisode
	assignHistorical
)

// errLeaseLost: a save found another pass owning the lease (ours expired).
var errLeaseLost = errors.New("fill: lease lost to another pass")

// stateSQL is every statement that touches <schema>.fill_state.
type stateSQL struct {
	acquire string
	save    string
	release string
}

const stateColumns = `started, watermark, historical_head, historical_marker::text, historical_proven,
	episode_from, episode_first_seen_at, episode_marker::text, episode_marker_head, proof_blocked_since`

func newStateSQL(schema store.Schema) *stateSQL {
	t := schema.Table("fill_state")
	return &stateSQL{
		// Compare-and-set on a free or expired lease, against the database
		// clock (one clock for every Lambda environment). The outer SELECT
		// reads the row as it was before the UPDATE (a data-modifying CTE is
		// invisible to its own statement), which is the same state either
		// way: so one statement takes the lease and loads the state, and a
		// pass that loses still reports the watermark.
		acquire: `WITH took AS (
				UPDATE ` + t + ` SET lease_owner = $1, lease_expires_at = now() + $2::bigint * interval '1 millisecond'
				WHERE singleton AND (lease_owner IS NULL OR lease_expires_at <= now())
				RETURNING 1)
			SELECT EXISTS (SELECT 1 FROM took), ` + stateColumns + ` FROM ` + t + ` WHERE singleton`,
		// One save for every checkpoint, conditioned on still owning the
		// lease, which it renews (or gives up, $15). The marker is assigned
		// *here*, by pg_current_xact_id() in this UPDATE, so it is always a
		// later statement than the head read it pairs with (§3.2), and it
		// is persisted in the same breath: a crash cannot leave a marker the
		// next pass does not know. The xid is this autocommit statement's
		// own; it commits at once, which is all a horizon needs.
		save: `UPDATE ` + t + ` SET
				started = $2,
				watermark = GREATEST(watermark, $3),
				historical_head = $4,
				historical_marker = CASE WHEN $5 THEN pg_current_xact_id() ELSE $6::text::xid8 END,
				historical_proven = $7,
				episode_from = $8,
				episode_first_seen_at = $9,
				episode_marker = CASE WHEN $10 THEN pg_current_xact_id() ELSE $11::text::xid8 END,
				episode_marker_head = $12,
				proof_blocked_since = $13,
				lease_owner = CASE WHEN $15 THEN NULL ELSE lease_owner END,
				lease_expires_at = CASE WHEN $15 THEN NULL ELSE now() + $14::bigint * interval '1 millisecond' END,
				updated_at = now()
			WHERE singleton AND lease_owner = $1
			RETURNING watermark, historical_marker::text, episode_marker::text`,
		release: `UPDATE ` + t + ` SET lease_owner = NULL, lease_expires_at = NULL WHERE singleton AND lease_owner = $1`,
	}
}

// newOwner is a lease token, unique per pass.
func newOwner() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// acquireLease takes the lease for d if it is free or expired, and loads
// the state either way.
func (s *stateSQL) acquireLease(ctx context.Context, q store.Querier, owner string, d time.Duration) (State, bool, error) {
	var (
		st                        State
		took                      bool
		histMarker, epMarker      *string
		epFrom, epMarkerHead      *int64
		epFirstSeen, blockedSince *time.Time
	)
	err := q.QueryRow(ctx, s.acquire, owner, d.Milliseconds()).Scan(&took,
		&st.Started, &st.Watermark, &st.HistoricalHead, &histMarker, &st.HistoricalProven,
		&epFrom, &epFirstSeen, &epMarker, &epMarkerHead, &blockedSince)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, false, errors.New("fill: fill_state has no row: run the migrations (infra/sql/0003_fill_state.sql)")
	}
	if err != nil {
		return st, false, fmt.Errorf("take fill lease: %w", err)
	}
	if st.HistoricalMarker, err = parseXID(histMarker); err != nil {
		return st, false, err
	}
	st.ProofBlockedSince = blockedSince
	if epFrom != nil && epFirstSeen != nil {
		ep := &Episode{From: *epFrom, FirstSeenAt: *epFirstSeen}
		if ep.Marker, err = parseXID(epMarker); err != nil {
			return st, false, err
		}
		if epMarkerHead != nil {
			ep.MarkerHead = *epMarkerHead
		}
		st.Episode = ep
	}
	return st, took, nil
}

// saveState writes st, renewing the lease for d (or releasing it), and
// assigns a marker when asked; it returns the state as stored (watermark
// raised by GREATEST, markers filled in).
func (s *stateSQL) saveState(ctx context.Context, q store.Querier, owner string, st State, a assign, d time.Duration, release bool) (State, error) {
	var (
		epFrom, epMarkerHead *int64
		epFirstSeen          *time.Time
		epMarker             *string
	)
	if ep := st.Episode; ep != nil {
		epFrom, epFirstSeen, epMarkerHead = &ep.From, &ep.FirstSeenAt, &ep.MarkerHead
		epMarker = formatXID(ep.Marker)
		if ep.Marker == nil && a != assignEpisode {
			epMarkerHead = nil
		}
	}
	var (
		w                       int64
		histMarker, epMarkerOut *string
	)
	err := q.QueryRow(ctx, s.save, owner,
		st.Started, st.Watermark, st.HistoricalHead,
		a == assignHistorical, formatXID(st.HistoricalMarker), st.HistoricalProven,
		epFrom, epFirstSeen, a == assignEpisode, epMarker, epMarkerHead,
		st.ProofBlockedSince, d.Milliseconds(), release,
	).Scan(&w, &histMarker, &epMarkerOut)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, errLeaseLost
	}
	if err != nil {
		return st, fmt.Errorf("save fill state: %w", err)
	}
	st.Watermark = w
	if st.HistoricalMarker, err = parseXID(histMarker); err != nil {
		return st, err
	}
	if st.Episode != nil {
		ep := *st.Episode
		if ep.Marker, err = parseXID(epMarkerOut); err != nil {
			return st, err
		}
		st.Episode = &ep
	}
	return st, nil
}

// releaseLease gives the lease up if this pass still owns it.
func (s *stateSQL) releaseLease(ctx context.Context, q store.Querier, owner string) error {
	if _, err := q.Exec(ctx, s.release, owner); err != nil {
		return fmt.Errorf("release fill lease: %w", err)
	}
	return nil
}

// xid8 travels as text: pgx has no xid8 codec, and text keeps all 64 bits.
func parseXID(s *string) (*uint64, error) {
	if s == nil {
		return nil, nil
	}
	v, err := strconv.ParseUint(*s, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("fill state: xid8 %q: %w", *s, err)
	}
	return &v, nil
}

func formatXID(x *uint64) *string {
	if x == nil {
		return nil
	}
	s := strconv.FormatUint(*x, 10)
	return &s
}
