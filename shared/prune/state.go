package prune

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

//go:embed prune_state.sql
var sqlFiles embed.FS

var stateFile = sqltext.MustParse(sqlFiles, "prune_state.sql")

// record adds one pass to prune_state.
func record(ctx context.Context, q store.Querier, sql string, res *Result) error {
	_, err := q.Exec(ctx, sql, pgx.NamedArgs{"deliveries": res.DeletedDeliveries, "events": res.DeletedEvents})
	if err != nil {
		return fmt.Errorf("record the pass in prune_state: %w", err)
	}
	return nil
}

// State is prune_state as an operator sees it (outboxkeeper status).
type State struct {
	Passes int64 `json:"passes"`
	// LastPassAt is when the last pass ended, nil before the first.
	LastPassAt             *time.Time `json:"last_pass_at"`
	LastDeletedDeliveries  int64      `json:"last_deleted_deliveries"`
	LastDeletedEvents      int64      `json:"last_deleted_events"`
	DeletedDeliveriesTotal int64      `json:"deleted_deliveries_total"`
	DeletedEventsTotal     int64      `json:"deleted_events_total"`
}

// ReadState reads the one row of prune_state (the zero State when an
// operator deleted it: the next pass recreates it).
func ReadState(ctx context.Context, q store.Querier, schema store.Schema) (State, error) {
	var s State
	err := q.QueryRow(ctx, stateFile.Statement("read", schema.Name())).Scan(
		&s.Passes, &s.LastPassAt, &s.LastDeletedDeliveries, &s.LastDeletedEvents, &s.DeletedDeliveriesTotal, &s.DeletedEventsTotal)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return State{}, fmt.Errorf("read prune_state: %w", err)
	}
	return s, nil
}
