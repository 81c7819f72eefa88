package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Delivery states (deliveries.state).
const (
	StatePending   = "pending"
	StateDelivered = "delivered"
	StateAcked     = "acked"
	StateDead      = "dead"
)

// DeliverySweep runs the sweep's statements of deliveries.sql
// (docs/design.md §6): set-based resets of stuck rows, the open-work counts
// and the relay's wake.
type DeliverySweep struct {
	channel string
	reset   string
	counts  string
	wake    string
}

// NewDeliverySweep renders the sweep's statements for schema.
func NewDeliverySweep(schema Schema) *DeliverySweep {
	n := schema.Name()
	return &DeliverySweep{
		channel: schema.DeliveriesChannel(),
		reset:   DeliveriesSQL.Statement("sweep_reset", n),
		counts:  DeliveriesSQL.Statement("count_open", n),
		wake:    DeliveriesSQL.Statement("wake", n),
	}
}

// ResetParams is one sweep batch.
type ResetParams struct {
	// StuckAfter is how long a row stays delivered before it is stuck.
	StuckAfter time.Duration
	// Limit is the most rows the batch moves.
	Limit int
	// MaxRedeliveries is the redeliveries at which a stuck row becomes
	// dead instead (0: never).
	MaxRedeliveries int
}

// SweepBatch is what one reset statement did.
type SweepBatch struct {
	Reset int64 // rows put back to pending
	Dead  int64 // rows that reached the redelivery limit and became dead
	More  bool  // stuck rows remain after the last one this batch locked
}

// ResetStuck moves up to p.Limit deliveries that have been delivered for
// longer than p.StuckAfter back to pending (redeliveries + 1), or to dead
// when their redeliveries already reached p.MaxRedeliveries, in one
// statement. Concurrent callers touch disjoint rows; each row is moved once.
func (s *DeliverySweep) ResetStuck(ctx context.Context, q Querier, p ResetParams) (SweepBatch, error) {
	var b SweepBatch
	args := pgx.StrictNamedArgs{"stuck_after_us": p.StuckAfter.Microseconds(), "batch": p.Limit, "max_redeliveries": p.MaxRedeliveries}
	if err := q.QueryRow(ctx, s.reset, args).Scan(&b.Reset, &b.Dead, &b.More); err != nil {
		return SweepBatch{}, fmt.Errorf("reset stuck deliveries (limit %d): %w", p.Limit, err)
	}
	return b, nil
}

// OpenCounts describes the open deliveries (pending or delivered).
type OpenCounts struct {
	StuckPending  int64   // pending, created longer than the threshold ago
	Open          int64   // pending + delivered
	OldestOpenAge float64 // seconds since the oldest open row was created, 0 if none
}

// CountOpen reads the open-work figures in one statement.
func (s *DeliverySweep) CountOpen(ctx context.Context, q Querier, stuckAfter time.Duration) (OpenCounts, error) {
	var c OpenCounts
	args := pgx.StrictNamedArgs{"stuck_after_us": stuckAfter.Microseconds()}
	if err := q.QueryRow(ctx, s.counts, args).Scan(&c.StuckPending, &c.Open, &c.OldestOpenAge); err != nil {
		return OpenCounts{}, fmt.Errorf("count open deliveries: %w", err)
	}
	return c, nil
}

// Wake notifies <schema>_deliveries with {"reset":R,"stuck_pending":P}, so a
// LISTENing relay drains at once instead of at its next poll.
func (s *DeliverySweep) Wake(ctx context.Context, q Querier, reset, stuckPending int64) error {
	if _, err := q.Exec(ctx, s.wake, pgx.StrictNamedArgs{"reset": reset, "stuck_pending": stuckPending}); err != nil {
		return fmt.Errorf("wake relay on %s: %w", s.channel, err)
	}
	return nil
}

// DeliveryPrune runs the prune pass's statement of deliveries.sql
// (docs/design.md §6b): set-based deletes of acked and dead rows past
// their retention.
type DeliveryPrune struct {
	delete string
}

// NewDeliveryPrune renders the prune statement for schema.
func NewDeliveryPrune(schema Schema) *DeliveryPrune {
	return &DeliveryPrune{delete: DeliveriesSQL.Statement("prune", schema.Name())}
}

// DeliveryPruneParams is one delivery prune batch. A negative retention
// keeps those rows.
type DeliveryPruneParams struct {
	// Cursor is where the batch starts (exclusive).
	Cursor int64
	// AckedAfter and DeadAfter are the retentions of acked and dead rows.
	AckedAfter, DeadAfter time.Duration
	// Limit is the most ids the batch covers.
	Limit int
}

// DeliveryPruneBatch is what one delete statement did.
type DeliveryPruneBatch struct {
	Acked, Dead int64 // rows deleted, by state
	// Cursor is where the next batch starts (exclusive).
	Cursor int64
	// Done says the table ended, or the rows from Cursor on are too young.
	Done bool
}

// Prune deletes, among the p.Limit rows after p.Cursor, those acked longer
// than p.AckedAfter ago and dead longer than p.DeadAfter ago, in one
// statement. Open rows are never touched.
func (dp *DeliveryPrune) Prune(ctx context.Context, q Querier, p DeliveryPruneParams) (DeliveryPruneBatch, error) {
	acked, dead := retention(p.AckedAfter), retention(p.DeadAfter)
	shortest := acked
	if shortest == nil || (dead != nil && *dead < *shortest) {
		shortest = dead
	}
	if shortest == nil {
		return DeliveryPruneBatch{Cursor: p.Cursor, Done: true}, nil
	}
	var b DeliveryPruneBatch
	args := pgx.StrictNamedArgs{"cursor": p.Cursor, "batch": p.Limit, "acked_us": acked, "dead_us": dead, "shortest_us": *shortest}
	if err := q.QueryRow(ctx, dp.delete, args).Scan(&b.Acked, &b.Dead, &b.Cursor, &b.Done); err != nil {
		return DeliveryPruneBatch{}, fmt.Errorf("prune deliveries after id %d (limit %d): %w", p.Cursor, p.Limit, err)
	}
	return b, nil
}

// retention is d in microseconds, nil (keep) when d is negative.
func retention(d time.Duration) *int64 {
	if d < 0 {
		return nil
	}
	us := d.Microseconds()
	return &us
}

// DeliveryAdmin runs the operator CLI's statements of deliveries.sql: the
// figures `outboxkeeper status` shows, and listing and retrying dead rows.
// None reads a payload (the operator role cannot).
type DeliveryAdmin struct {
	counts     string
	listDead   string
	retryIDs   string
	retryOlder string
}

// NewDeliveryAdmin renders the statements for schema.
func NewDeliveryAdmin(schema Schema) *DeliveryAdmin {
	n := schema.Name()
	return &DeliveryAdmin{
		counts:     DeliveriesSQL.Statement("status_counts", n),
		listDead:   DeliveriesSQL.Statement("list_dead", n),
		retryIDs:   DeliveriesSQL.Statement("retry_ids", n),
		retryOlder: DeliveriesSQL.Statement("retry_older", n),
	}
}

// DeadDelivery is a dead row as the operator sees it: no payload.
type DeadDelivery struct {
	ID           int64      `json:"id"`
	Recipient    string     `json:"recipient"`
	Kind         string     `json:"kind"`
	TenantID     *string    `json:"tenant_id"`
	Attempts     int        `json:"attempts"`
	Redeliveries int        `json:"redeliveries"`
	CreatedAt    time.Time  `json:"created_at"`
	DeliveredAt  *time.Time `json:"delivered_at"`
	DeadAt       time.Time  `json:"dead_at"`
	// DeadReason is why the deliver function made it dead
	// (unknown_recipient, recipient_disabled, gone); nil for a row the
	// sweep made dead at SWEEP_MAX_REDELIVERIES.
	DeadReason *string `json:"dead_reason"`
}

// DeliveryCounts are the figures of `outboxkeeper status`.
type DeliveryCounts struct {
	Pending   int64 `json:"pending"`
	Delivered int64 `json:"delivered"`
	// Stuck counts delivered rows older than the threshold asked for: the
	// sweep's next pass resets them.
	Stuck int64 `json:"stuck"`
	// OldestOpenSeconds is the age of the oldest pending or delivered row
	// (by created_at), nil when there is none.
	OldestOpenSeconds *float64 `json:"oldest_open_s"`
	Dead              int64    `json:"dead"`
	OldestDeadSeconds *float64 `json:"oldest_dead_s"`
}

// Open is pending + delivered.
func (c DeliveryCounts) Open() int64 { return c.Pending + c.Delivered }

// Counts reads the figures in one statement; stuckAfter is the sweep's
// threshold (SWEEP_STUCK_AFTER).
func (a *DeliveryAdmin) Counts(ctx context.Context, q Querier, stuckAfter time.Duration) (DeliveryCounts, error) {
	var c DeliveryCounts
	if err := q.QueryRow(ctx, a.counts, pgx.StrictNamedArgs{"stuck_after_us": stuckAfter.Microseconds()}).Scan(&c.Pending, &c.Delivered, &c.Stuck,
		&c.OldestOpenSeconds, &c.Dead, &c.OldestDeadSeconds); err != nil {
		return DeliveryCounts{}, fmt.Errorf("count deliveries: %w", err)
	}
	return c, nil
}

// ListDead returns up to limit dead rows dead for at least olderThan,
// newest first.
func (a *DeliveryAdmin) ListDead(ctx context.Context, q Querier, olderThan time.Duration, limit int) ([]DeadDelivery, error) {
	args := pgx.StrictNamedArgs{"older_than_us": olderThan.Microseconds(), "limit": limit}
	out, err := Rows(ctx, q, a.listDead, args, pgx.RowToStructByPos[DeadDelivery])
	if err != nil {
		return nil, fmt.Errorf("list dead deliveries: %w", err)
	}
	return out, nil
}

// RetryOutcome is what a retry by id did to one id.
type RetryOutcome struct {
	ID    int64 `json:"id"`
	Reset bool  `json:"reset"`
	// State is the row's state when the statement ran: "dead" for one
	// reset, another state for one that was not dead, "" for no such row.
	State string `json:"state"`
}

// RetryIDs puts the rows among ids that are still dead back to pending,
// in one compare-and-set statement, and says what happened to each id.
func (a *DeliveryAdmin) RetryIDs(ctx context.Context, q Querier, ids []int64) ([]RetryOutcome, error) {
	out, err := Rows(ctx, q, a.retryIDs, pgx.StrictNamedArgs{"ids": ids}, pgx.RowToStructByPos[RetryOutcome])
	if err != nil {
		return nil, fmt.Errorf("retry dead deliveries: %w", err)
	}
	return out, nil
}

// RetryOlderThan puts up to limit rows dead for at least olderThan back
// to pending, oldest first, in one statement; it returns how many moved
// and how many more such rows remain.
func (a *DeliveryAdmin) RetryOlderThan(ctx context.Context, q Querier, olderThan time.Duration, limit int) (reset, remaining int64, err error) {
	args := pgx.StrictNamedArgs{"older_than_us": olderThan.Microseconds(), "limit": limit}
	if err := q.QueryRow(ctx, a.retryOlder, args).Scan(&reset, &remaining); err != nil {
		return 0, 0, fmt.Errorf("retry dead deliveries: %w", err)
	}
	return reset, remaining, nil
}
