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

// Skips is the SQL for <schema>.stall_skips. Only <schema>.skip_stall
// writes a skip (SECURITY DEFINER: the caller needs EXECUTE, not INSERT);
// the fill marks them counted.
type Skips struct {
	skip       string
	recent     string
	unreported string
}

const skipColumns = `id, skipped_at, db_user, operator, reason, from_watermark, to_sequence, head,
	written, first_written, last_written, sessions, reported_at`

// NewSkips renders the statements for schema.
func NewSkips(schema Schema) *Skips {
	t := schema.Table("stall_skips")
	return &Skips{
		skip:   `SELECT ` + skipColumns + ` FROM ` + schema.Table("skip_stall") + `(@to, @reason, @operator, @sessions::jsonb)`,
		recent: `SELECT ` + skipColumns + ` FROM ` + t + ` ORDER BY id DESC LIMIT $1`,
		// Each skip is counted once: the row lock makes a concurrent pass
		// that read the same row re-check reported_at and skip it. The
		// table holds a row per operator action, so a scan is nothing.
		unreported: `WITH taken AS (
				UPDATE ` + t + ` SET reported_at = now() WHERE reported_at IS NULL RETURNING written)
			SELECT coalesce(sum(written), 0)::bigint FROM taken`,
	}
}

func scanSkip(row pgx.CollectableRow) (Skip, error) {
	var s Skip
	err := row.Scan(&s.ID, &s.SkippedAt, &s.DBUser, &s.Operator, &s.Reason, &s.FromWatermark, &s.ToSequence, &s.Head,
		&s.Written, &s.FirstWritten, &s.LastWritten, &s.Sessions, &s.ReportedAt)
	return s, err
}

// Skip writes an operator placeholder for every missing sequence up to
// to and records who, when and why, in one transaction (skip_stall, which
// refuses a range above the head or below the watermark, and never waits
// on or overwrites a live writer's row). sessions is what the operator
// was shown, kept with the record.
func (s *Skips) Skip(ctx context.Context, q Querier, to int64, reason, operator string, sessions json.RawMessage) (Skip, error) {
	if sessions == nil {
		sessions = json.RawMessage(`[]`)
	}
	rows, err := q.Query(ctx, s.skip, pgx.NamedArgs{"to": to, "reason": reason, "operator": operator, "sessions": string(sessions)})
	if err != nil {
		return Skip{}, fmt.Errorf("skip to %d: %w", to, err)
	}
	out, err := pgx.CollectExactlyOneRow(rows, scanSkip)
	if err != nil {
		return Skip{}, fmt.Errorf("skip to %d: %w", to, err)
	}
	return out, nil
}

// Recent returns the last limit skips, newest first.
func (s *Skips) Recent(ctx context.Context, q Querier, limit int) ([]Skip, error) {
	rows, err := q.Query(ctx, s.recent, limit)
	if err != nil {
		return nil, fmt.Errorf("read stall skips: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanSkip)
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
	if err := q.QueryRow(ctx, s.unreported).Scan(&n); err != nil {
		return 0, fmt.Errorf("count operator placeholders: %w", err)
	}
	return n, nil
}
