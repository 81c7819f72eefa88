package sweep

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

//go:embed sweep_state.sql
var sqlFiles embed.FS

var stateFile = sqltext.MustParse(sqlFiles, "sweep_state.sql")

// record adds one pass to sweep_state.
func record(ctx context.Context, q store.Querier, sql string, res *Result) error {
	_, err := q.Exec(ctx, sql, pgx.NamedArgs{"reset": res.Reset, "dead": res.Dead, "stuck_pending": res.StuckPending})
	if err != nil {
		return fmt.Errorf("record the pass in sweep_state: %w", err)
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
	err := q.QueryRow(ctx, stateFile.Statement("read", schema.Name())).Scan(
		&s.Passes, &s.LastPassAt, &s.LastReset, &s.LastDead, &s.LastStuckPending, &s.ResetsTotal, &s.DeadTotal)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return State{}, fmt.Errorf("read sweep_state: %w", err)
	}
	return s, nil
}
