package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Skip is one row of <schema>.stall_skips: an operator's skip past a
// stall, as skip_stall recorded it.
type Skip struct {
	ID        int64     `json:"id"`
	SkippedAt time.Time `json:"skipped_at"`
	// DBUser is the database login that ran it (session_user); Operator the
	// person the CLI named.
	DBUser   string `json:"db_user"`
	Operator string `json:"operator"`
	Reason   string `json:"reason"`
	// FromWatermark and ToSequence bound the range (from, to] skipped;
	// Head is the allocation head then.
	FromWatermark int64 `json:"from_watermark"`
	ToSequence    int64 `json:"to_sequence"`
	Head          int64 `json:"head"`
	// Written counts the placeholders written (the missing sequences);
	// FirstWritten and LastWritten bound them, nil when none was.
	Written      int64           `json:"written"`
	FirstWritten *int64          `json:"first_written"`
	LastWritten  *int64          `json:"last_written"`
	Sessions     json.RawMessage `json:"sessions"`
	// ReportedAt is when a fill pass counted it in OperatorFilled.
	ReportedAt *time.Time `json:"reported_at"`
}

// Skips runs the statements of stall_skips.sql on one schema.
type Skips struct{ schema string }

// NewSkips runs the statements on schema.
func NewSkips(schema Schema) *Skips { return &Skips{schema: schema.Name()} }

// SkipParams is one operator's skip.
type SkipParams struct {
	// To is the last sequence skipped: every missing one up to it gets a
	// placeholder.
	To int64
	// Reason and Operator go on the record.
	Reason, Operator string
	// Sessions is what the operator was shown, kept with the record;
	// nil records [].
	Sessions json.RawMessage
}

// Skip writes an operator placeholder for every missing sequence up to
// p.To and records who, when and why, in one transaction (skip_stall,
// which refuses a range above the head or below the watermark, and never
// waits on or overwrites a live writer's row).
func (s *Skips) Skip(ctx context.Context, q Querier, p SkipParams) (Skip, error) {
	sessions := p.Sessions
	if sessions == nil {
		sessions = json.RawMessage(`[]`)
	}
	args := pgx.StrictNamedArgs{"to": p.To, "reason": p.Reason, "operator": p.Operator, "sessions": string(sessions)}
	rows, err := q.Query(ctx, StallSkipsSQL.Statement("skip_stall", s.schema), args)
	if err != nil {
		return Skip{}, fmt.Errorf("skip to %d: %w", p.To, err)
	}
	out, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[Skip])
	if err != nil {
		return Skip{}, fmt.Errorf("skip to %d: %w", p.To, err)
	}
	return out, nil
}

// Recent returns the last limit skips, newest first.
func (s *Skips) Recent(ctx context.Context, q Querier, limit int) ([]Skip, error) {
	out, err := Rows(ctx, q, StallSkipsSQL.Statement("recent", s.schema), pgx.StrictNamedArgs{"limit": limit}, pgx.RowToStructByPos[Skip])
	if err != nil {
		return nil, fmt.Errorf("read stall skips: %w", err)
	}
	return out, nil
}

// TakeUnreported marks every skip not yet counted as counted, and returns
// how many placeholders they wrote: what a fill pass reports as
// OperatorFilled.
func (s *Skips) TakeUnreported(ctx context.Context, q Querier) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, StallSkipsSQL.Statement("take_unreported", s.schema)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count operator placeholders: %w", err)
	}
	return n, nil
}
