package sweep

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// stateSQL is the SQL for <schema>.sweep_state (shared/migrations/0004), the
// sweep's own table; it lives beside the function that owns it. The
// running totals are the exception: each reset statement adds what it
// moved in the same statement (internal/store/deliveries.go), so they stay
// exact when a pass fails midway.
type stateSQL struct {
	recordPass string
}

func newStateSQL(schema store.Schema) stateSQL {
	t := schema.Table("sweep_state")
	return stateSQL{
		// An upsert rather than an update: the migration inserts the one
		// row, but if an operator deleted it the next pass recreates it
		// instead of silently recording nothing. passes is added in SQL, so
		// concurrent passes never lose each other's count.
		recordPass: `INSERT INTO ` + t + ` AS s (id, passes, last_pass_at, last_reset, last_dead, last_stuck_pending)
			VALUES (true, 1, now(), $1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET
				passes             = s.passes + 1,
				last_pass_at       = now(),
				last_reset         = excluded.last_reset,
				last_dead          = excluded.last_dead,
				last_stuck_pending = excluded.last_stuck_pending`,
	}
}

// record adds one pass to sweep_state.
func (s stateSQL) record(ctx context.Context, q store.Querier, res *Result) error {
	if _, err := q.Exec(ctx, s.recordPass, res.Reset, res.Dead, res.StuckPending); err != nil {
		return fmt.Errorf("record pass in sweep_state: %w", err)
	}
	return nil
}

// State is sweep_state as an operator sees it (outboxkeeper status).
type State struct {
	Passes int64 `json:"passes"`
	// LastPassAt is when the last pass ended, nil before the first.
	LastPassAt       *time.Time `json:"last_pass_at"`
	LastReset        int64      `json:"last_reset"`
	LastDead         int64      `json:"last_dead"`
	LastStuckPending int64      `json:"last_stuck_pending"`
	ResetsTotal      int64      `json:"resets_total"`
	DeadTotal        int64      `json:"dead_total"`
}

// ReadState reads the one row of sweep_state (the zero State when an
// operator deleted it: the next pass recreates it).
func ReadState(ctx context.Context, q store.Querier, schema store.Schema) (State, error) {
	var s State
	err := q.QueryRow(ctx, `SELECT passes, last_pass_at, last_reset, last_dead, last_stuck_pending, resets_total, dead_total
		FROM `+schema.Table("sweep_state")+` WHERE id`).Scan(
		&s.Passes, &s.LastPassAt, &s.LastReset, &s.LastDead, &s.LastStuckPending, &s.ResetsTotal, &s.DeadTotal)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return State{}, fmt.Errorf("read sweep_state: %w", err)
	}
	return s, nil
}
