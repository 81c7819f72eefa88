package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ConsumerStatus is one registered consumer as consumer_status() sees it.
type ConsumerStatus struct {
	Name      string    `json:"name"`
	Position  int64     `json:"position"`
	UpdatedAt time.Time `json:"last_commit"`
	Head      int64     `json:"head"`
	Watermark int64     `json:"watermark"`
	// Lag is the allocation head minus the position.
	Lag int64 `json:"lag"`
	// OldestUntakenAt is when the first event after the position (at or
	// below the fill watermark) was recorded; nil when it has taken all.
	OldestUntakenAt *time.Time `json:"oldest_untaken_at"`
	// EventsAfterSeconds is the prune's recorded retention (0: forever),
	// nil until a prune pass recorded it.
	EventsAfterSeconds *float64 `json:"events_after_seconds"`
	// HoldsRetention says only this consumer's position keeps events past
	// the prune's retention; HeldSince is since when.
	HoldsRetention bool       `json:"holds_retention"`
	HeldSince      *time.Time `json:"held_since"`
}

// ConsumerChange is one row of <schema>.consumer_changes.
type ConsumerChange struct {
	ID        int64     `json:"id"`
	ChangedAt time.Time `json:"changed_at"`
	// DBUser is the login (session_user), Operator the person the CLI named.
	DBUser   string `json:"db_user"`
	Operator string `json:"operator"`
	Reason   string `json:"reason"`
	Consumer string `json:"consumer"`
	// Action is rewind or retire.
	Action       string `json:"action"`
	FromPosition int64  `json:"from_position"`
	// ToPosition is nil for a retire.
	ToPosition *int64 `json:"to_position"`
}

// ConsumerOps runs the statements of consumer_changes.sql on one schema.
type ConsumerOps struct{ schema string }

// NewConsumerOps runs the statements on schema.
func NewConsumerOps(schema Schema) *ConsumerOps { return &ConsumerOps{schema: schema.Name()} }

// ConsumerSummary is what the sweep's metrics say of the consumers.
type ConsumerSummary struct {
	// MaxLag is the largest lag behind the allocation head.
	MaxLag int64
	// Holding counts the consumers holding retention back; HeldSeconds is
	// the longest any has (0 when none does).
	Holding     int64
	HeldSeconds float64
}

// Summary reads the consumers' figures in one statement.
func (o *ConsumerOps) Summary(ctx context.Context, q Querier) (ConsumerSummary, error) {
	var s ConsumerSummary
	if err := q.QueryRow(ctx, ConsumerChangesSQL.Statement("summary", o.schema)).Scan(&s.MaxLag, &s.Holding, &s.HeldSeconds); err != nil {
		return s, fmt.Errorf("consumer summary: %w", err)
	}
	return s, nil
}

// Status lists every registered consumer, the slowest first.
func (o *ConsumerOps) Status(ctx context.Context, q Querier) ([]ConsumerStatus, error) {
	out, err := Rows(ctx, q, ConsumerChangesSQL.Statement("status", o.schema), nil, pgx.RowToStructByPos[ConsumerStatus])
	if err != nil {
		return nil, fmt.Errorf("consumer status: %w", err)
	}
	return out, nil
}

// Rewind moves consumer name back to position to, on the record.
func (o *ConsumerOps) Rewind(ctx context.Context, q Querier, name string, to int64, reason, operator string) (ConsumerChange, error) {
	return o.change(ctx, q, ConsumerChangesSQL.Statement("rewind", o.schema), pgx.StrictNamedArgs{"name": name, "to": to, "reason": reason, "operator": operator})
}

// Retire deletes consumer name, on the record.
func (o *ConsumerOps) Retire(ctx context.Context, q Querier, name, reason, operator string) (ConsumerChange, error) {
	return o.change(ctx, q, ConsumerChangesSQL.Statement("retire", o.schema), pgx.StrictNamedArgs{"name": name, "reason": reason, "operator": operator})
}

func (o *ConsumerOps) change(ctx context.Context, q Querier, sql string, args pgx.StrictNamedArgs) (ConsumerChange, error) {
	rows, err := q.Query(ctx, sql, args)
	if err != nil {
		return ConsumerChange{}, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[ConsumerChange])
}

// Recent is the last limit changes, the newest first.
func (o *ConsumerOps) Recent(ctx context.Context, q Querier, limit int) ([]ConsumerChange, error) {
	out, err := Rows(ctx, q, ConsumerChangesSQL.Statement("recent", o.schema), pgx.StrictNamedArgs{"limit": limit}, pgx.RowToStructByPos[ConsumerChange])
	if err != nil {
		return nil, fmt.Errorf("consumer changes: %w", err)
	}
	return out, nil
}
