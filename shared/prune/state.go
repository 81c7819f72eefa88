package prune

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// stateSQL is the SQL for <schema>.prune_state (shared/migrations/0008), the
// prune's own table; it lives beside the function that owns it.
type stateSQL struct {
	recordPass string
}

func newStateSQL(schema store.Schema) stateSQL {
	t := schema.Table("prune_state")
	return stateSQL{
		// An upsert, as the sweep's: an operator who deleted the row gets
		// it back at the next pass. Totals are added in SQL, so
		// overlapping passes never lose each other's counts.
		recordPass: `INSERT INTO ` + t + ` AS s (id, passes, last_pass_at, last_deleted_deliveries, last_deleted_events,
				deleted_deliveries_total, deleted_events_total)
			VALUES (true, 1, now(), $1, $2, $1, $2)
			ON CONFLICT (id) DO UPDATE SET
				passes                   = s.passes + 1,
				last_pass_at             = now(),
				last_deleted_deliveries  = excluded.last_deleted_deliveries,
				last_deleted_events      = excluded.last_deleted_events,
				deleted_deliveries_total = s.deleted_deliveries_total + excluded.deleted_deliveries_total,
				deleted_events_total     = s.deleted_events_total + excluded.deleted_events_total`,
	}
}

// record adds one pass to prune_state.
func (s stateSQL) record(ctx context.Context, q store.Querier, res *Result) error {
	if _, err := q.Exec(ctx, s.recordPass, res.DeletedDeliveries, res.DeletedEvents); err != nil {
		return fmt.Errorf("prune: record pass in prune_state: %w", err)
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
	err := q.QueryRow(ctx, `SELECT passes, last_pass_at, last_deleted_deliveries, last_deleted_events,
			deleted_deliveries_total, deleted_events_total
		FROM `+schema.Table("prune_state")+` WHERE id`).Scan(
		&s.Passes, &s.LastPassAt, &s.LastDeletedDeliveries, &s.LastDeletedEvents, &s.DeletedDeliveriesTotal, &s.DeletedEventsTotal)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return State{}, fmt.Errorf("read prune_state: %w", err)
	}
	return s, nil
}
