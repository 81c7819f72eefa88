package store

import (
	"context"
	"errors"
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

// Delivery is one row of <schema>.deliveries.
type Delivery struct {
	ID           int64
	Recipient    string
	Kind         string
	TenantID     *string
	Payload      []byte
	State        string // pending, delivered, acked or dead
	Attempts     int
	Redeliveries int
	CreatedAt    time.Time
	DeliveredAt  *time.Time
	AckedAt      *time.Time
	DeadAt       *time.Time
}

// ErrLostRace is matched (errors.Is) by every StateConflictError.
var ErrLostRace = errors.New("delivery state changed concurrently")

// StateConflictError is a lost compare-and-set: the row was not in the state
// the transition starts from (another relay, an ack or the sweep moved it).
type StateConflictError struct {
	ID     int64
	From   string // the state the transition required
	To     string
	Actual string // the state found, "" when the row does not exist
}

func (e *StateConflictError) Error() string {
	actual := e.Actual
	if actual == "" {
		actual = "missing"
	}
	return fmt.Sprintf("delivery %d: cannot move %s→%s: it is %s", e.ID, e.From, e.To, actual)
}

func (e *StateConflictError) Is(target error) bool { return target == ErrLostRace }

// Deliveries is the SQL for <schema>.deliveries.
type Deliveries struct {
	enqueue       string
	claim         string
	markDelivered string
	ack           string
	stateOf       string
}

const deliveryColumns = `id, recipient, kind, tenant_id, payload, state, attempts, redeliveries,
	created_at, delivered_at, acked_at, dead_at`

// NewDeliveries renders the statements for schema.
func NewDeliveries(schema Schema) *Deliveries {
	t := schema.Table("deliveries")
	return &Deliveries{
		enqueue: `INSERT INTO ` + t + ` (recipient, kind, tenant_id, payload) VALUES ($1, $2, $3, $4) RETURNING id`,
		// SKIP LOCKED lets several relays claim disjoint rows without
		// waiting on each other; the lock lasts as long as the caller's
		// transaction.
		claim: `SELECT ` + deliveryColumns + ` FROM ` + t + `
			WHERE state = 'pending' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`,
		// clock_timestamp(), not now(): a relay that claims, pushes and
		// marks in one transaction would otherwise stamp the claim time,
		// and a push slower than SWEEP_STUCK_AFTER would look stuck the
		// moment it commits.
		markDelivered: `UPDATE ` + t + ` SET state = 'delivered', attempts = attempts + 1, delivered_at = clock_timestamp()
			WHERE id = $1 AND state = 'pending'`,
		ack:     `UPDATE ` + t + ` SET state = 'acked', acked_at = clock_timestamp() WHERE id = $1 AND state = 'delivered'`,
		stateOf: `SELECT state FROM ` + t + ` WHERE id = $1`,
	}
}

// Enqueue adds a pending delivery and returns its id.
func (d *Deliveries) Enqueue(ctx context.Context, q Querier, recipient, kind string, tenantID *string, payload []byte) (int64, error) {
	if payload == nil {
		payload = []byte{}
	}
	var id int64
	if err := q.QueryRow(ctx, d.enqueue, recipient, kind, tenantID, payload).Scan(&id); err != nil {
		return 0, fmt.Errorf("enqueue delivery to %s: %w", recipient, err)
	}
	return id, nil
}

// ClaimPending locks up to limit pending rows for the caller's transaction.
func (d *Deliveries) ClaimPending(ctx context.Context, tx Querier, limit int) ([]Delivery, error) {
	rows, err := tx.Query(ctx, d.claim, limit)
	if err != nil {
		return nil, fmt.Errorf("claim pending deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("claim pending deliveries: %w", err)
	}
	return out, nil
}

func scanDelivery(row pgx.CollectableRow) (Delivery, error) {
	var r Delivery
	err := row.Scan(&r.ID, &r.Recipient, &r.Kind, &r.TenantID, &r.Payload, &r.State, &r.Attempts,
		&r.Redeliveries, &r.CreatedAt, &r.DeliveredAt, &r.AckedAt, &r.DeadAt)
	return r, err
}

// MarkDelivered moves a row pending→delivered, counting the attempt and
// stamping delivered_at (the sweep measures stuck time from it).
func (d *Deliveries) MarkDelivered(ctx context.Context, q Querier, id int64) error {
	return d.transition(ctx, q, d.markDelivered, id, StatePending, StateDelivered)
}

// Ack moves a row delivered→acked.
func (d *Deliveries) Ack(ctx context.Context, q Querier, id int64) error {
	return d.transition(ctx, q, d.ack, id, StateDelivered, StateAcked)
}

// transition runs one compare-and-set and turns "0 rows" into a typed error
// naming the state actually found.
func (d *Deliveries) transition(ctx context.Context, q Querier, sql string, id int64, from, to string) error {
	tag, err := q.Exec(ctx, sql, id)
	if err != nil {
		return fmt.Errorf("delivery %d %s→%s: %w", id, from, to, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var actual string
	if err := q.QueryRow(ctx, d.stateOf, id).Scan(&actual); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("delivery %d %s→%s: read state: %w", id, from, to, err)
	}
	return &StateConflictError{ID: id, From: from, To: to, Actual: actual}
}

// DeliverySweep is the sweep's SQL for <schema>.deliveries (docs/design.md §6):
// set-based resets of stuck rows, the open-work counts and the relay wake.
// It sits beside the relay's statements so every statement that changes a
// delivery's state is in this file.
type DeliverySweep struct {
	schema Schema
	reset  string
	counts string
	wake   string
}

// SweepResetTag starts the reset statement's text, so it can be told apart
// in pg_stat_activity, in pg_stat_statements and by a statement tracer.
const SweepResetTag = "/* outboxkeeper sweep_reset */"

// NewDeliverySweep renders the sweep's statements for schema.
func NewDeliverySweep(schema Schema) *DeliverySweep {
	t := schema.Table("deliveries")
	// $1 is the stuck threshold in microseconds. The cutoff is taken from
	// the database clock (now()), not the caller's: delivered_at was
	// stamped by the same clock, so a skewed Lambda clock cannot make a
	// fresh delivery look stuck.
	cutoff := `now() - $1::bigint * interval '1 microsecond'`
	return &DeliverySweep{
		schema: schema,
		// One statement per batch, instead of the reference's list then one
		// compare-and-set per row: <schema>.sweep_reset (shared/migrations/0015)
		// locks the oldest stuck deliveries FOR UPDATE SKIP LOCKED, in the
		// order of deliveries_delivered_idx and measured from delivered_at
		// (the reference used created_at, so a row created long ago but
		// pushed a moment ago looked stuck); moves the very versions it
		// locked (a TID scan) back to pending, or to dead at $3
		// redeliveries (0: never), after re-checking on each row that it is
		// still delivered before the cutoff; adds what it moved to
		// sweep_state's totals; and says whether stuck rows remain after
		// the last one locked.
		// It is a function so that its plan can be pinned: on a table
		// fresh from mass UPDATEs that nothing analysed, the planner sorted
		// every stuck row per batch and joined the update to the batch by a
		// nested loop, both quadratic in a pass. The function's settings
		// leave it the index's order as the only way, and its statement
		// joins nothing (docs/design.md §6).
		reset: SweepResetTag + ` SELECT reset, dead, more FROM ` + schema.Table("sweep_reset") + `($1::bigint, $2::integer, $3::integer)`,
		// Open work in one statement over the open rows only (the partial
		// index deliveries_open_created_idx has the same predicate). Stuck
		// pending rows are counted by created_at: they have not been pushed
		// for that long, and the sweep does not change them — the wake
		// tells the relay to drain them.
		counts: `SELECT
				count(*) FILTER (WHERE state = 'pending' AND created_at < ` + cutoff + `),
				count(*),
				coalesce(extract(epoch FROM now() - min(created_at))::float8, 0)
			FROM ` + t + ` WHERE state IN ('pending', 'delivered')`,
		// The payload byte for byte as docs/design.md §2 writes it (json_build_object
		// would add spaces).
		wake: `SELECT pg_notify($1, '{"reset":' || $2::bigint || ',"stuck_pending":' || $3::bigint || '}')`,
	}
}

// SweepBatch is what one reset statement did.
type SweepBatch struct {
	Reset int64 // rows put back to pending
	Dead  int64 // rows that reached the redelivery limit and became dead
	More  bool  // stuck rows remain after the last one this batch locked
}

// ResetStuck moves up to limit deliveries that have been delivered for
// longer than stuckAfter back to pending (redeliveries + 1), or to dead when
// their redeliveries already reached maxRedeliveries (0: never), in one
// statement. Concurrent callers touch disjoint rows; each row is moved once.
func (s *DeliverySweep) ResetStuck(ctx context.Context, q Querier, stuckAfter time.Duration, limit, maxRedeliveries int) (SweepBatch, error) {
	var b SweepBatch
	if err := q.QueryRow(ctx, s.reset, stuckAfter.Microseconds(), limit, maxRedeliveries).Scan(&b.Reset, &b.Dead, &b.More); err != nil {
		return SweepBatch{}, fmt.Errorf("reset stuck deliveries (limit %d): %w", limit, err)
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
	if err := q.QueryRow(ctx, s.counts, stuckAfter.Microseconds()).Scan(&c.StuckPending, &c.Open, &c.OldestOpenAge); err != nil {
		return OpenCounts{}, fmt.Errorf("count open deliveries: %w", err)
	}
	return c, nil
}

// Wake notifies <schema>_deliveries with {"reset":R,"stuck_pending":P}, so a
// LISTENing relay drains at once instead of at its next poll.
func (s *DeliverySweep) Wake(ctx context.Context, q Querier, reset, stuckPending int64) error {
	if _, err := q.Exec(ctx, s.wake, s.schema.DeliveriesChannel(), reset, stuckPending); err != nil {
		return fmt.Errorf("wake relay on %s: %w", s.schema.DeliveriesChannel(), err)
	}
	return nil
}

// DeliveryPrune is the prune pass's SQL for <schema>.deliveries
// (docs/design.md §6b): set-based deletes of acked and dead rows past their
// retention. It sits with every other statement on the table.
type DeliveryPrune struct {
	delete string
}

// PruneDeliveriesTag starts the delete statement's text, so it can be
// told apart in pg_stat_activity and pg_stat_statements.
const PruneDeliveriesTag = "/* outboxkeeper prune_deliveries */"

// NewDeliveryPrune renders the prune statement for schema.
func NewDeliveryPrune(schema Schema) *DeliveryPrune {
	t := schema.Table("deliveries")
	// $3 and $4 are the acked and dead retentions in microseconds, NULL to
	// keep those rows; $5 the shorter of the two that are set. Cutoffs are
	// on the database clock, which stamped acked_at and dead_at.
	ackedGone := `state = 'acked' AND $3::bigint IS NOT NULL AND acked_at < now() - $3::bigint * interval '1 microsecond'`
	deadGone := `state = 'dead' AND $4::bigint IS NOT NULL AND dead_at < now() - $4::bigint * interval '1 microsecond'`
	return &DeliveryPrune{
		// One batch, one statement, its own transaction. Every secondary
		// index covers open rows only, so old acked rows are found the
		// way they were written, in id order:
		//  - r: the batch's range of ids, from the first after the cursor
		//    (one probe of the primary key) to $2 ids on: at most $2 rows.
		//  - gone: the delete of the range's acked and dead rows past
		//    their retention: one range scan of the primary key. Its
		//    condition is checked again on a row's latest version when
		//    another session changed it meanwhile (READ COMMITTED), so a
		//    row an operator moved back to pending since the statement's
		//    snapshot is left alone: never an open delivery. Reading a
		//    page first, locking its doomed rows (FOR UPDATE SKIP LOCKED)
		//    and finding them again by id (= ANY of 5000 ids) read and
		//    wrote every row twice and descended the index once per row: a
		//    batch cost five times a bare DELETE of the same rows
		//    (BENCHMARKS.md, row 6). Without the lock an overlapping pass
		//    waits for the other's one batch, then finds its rows gone and
		//    counts nothing; each row is still deleted and counted once.
		//  - done: nothing lies after the range (the table's highest id,
		//    one probe of the primary key's far end; asked as NOT EXISTS
		//    of a row past the range, the planner scanned the table from
		//    its start, through every row the pass had deleted and vacuum
		//    not yet removed, so a batch cost more the further it got), or
		//    it kept a row created too recently to be past either
		//    retention (asked only when it kept any: a row is acked or
		//    dead after it was created).
		//    created_at grows with the id (up to the length of a
		//    transaction), so the pass stops there rather than read the
		//    whole young tail of the table; a later pass moves on.
		// It answers with what it deleted (acked, dead), the next cursor
		// (the range's last id), and whether the pass is done with the
		// table.
		delete: PruneDeliveriesTag + `
			WITH r AS MATERIALIZED (
				SELECT (SELECT min(id) FROM ` + t + ` WHERE id > $1) AS first
			), gone AS (
				DELETE FROM ` + t + ` AS d USING r
				WHERE d.id >= r.first AND d.id < r.first + $2
				  AND ((` + ackedGone + `) OR (` + deadGone + `))
				RETURNING d.state
			), counted AS (
				SELECT count(*) FILTER (WHERE state = 'acked') AS acked,
					count(*) FILTER (WHERE state = 'dead') AS dead
				FROM gone
			)
			SELECT counted.acked, counted.dead,
				coalesce(r.first + $2 - 1, $1),
				CASE
					WHEN r.first IS NULL THEN true
					WHEN (SELECT max(n.id) FROM ` + t + ` AS n) < r.first + $2 THEN true
					WHEN counted.acked + counted.dead = $2 THEN false
					ELSE EXISTS (SELECT 1 FROM ` + t + ` AS y
						WHERE y.id >= r.first AND y.id < r.first + $2
						  AND y.created_at >= now() - $5::bigint * interval '1 microsecond')
				END
			FROM counted, r`,
	}
}

// DeliveryPruneBatch is what one delete statement did.
type DeliveryPruneBatch struct {
	Acked, Dead int64 // rows deleted, by state
	// Cursor is where the next batch starts (exclusive).
	Cursor int64
	// Done says the table ended, or the rows from Cursor on are too young.
	Done bool
}

// Prune deletes, among the limit rows after cursor, those acked longer
// than ackedAfter ago and dead longer than deadAfter ago (a negative
// retention keeps them), in one statement. Open rows are never touched.
func (p *DeliveryPrune) Prune(ctx context.Context, q Querier, cursor int64, ackedAfter, deadAfter time.Duration, limit int) (DeliveryPruneBatch, error) {
	retention := func(d time.Duration) *int64 {
		if d < 0 {
			return nil
		}
		us := d.Microseconds()
		return &us
	}
	acked, dead := retention(ackedAfter), retention(deadAfter)
	var shortest *int64
	for _, r := range []*int64{acked, dead} {
		if r != nil && (shortest == nil || *r < *shortest) {
			shortest = r
		}
	}
	var b DeliveryPruneBatch
	if shortest == nil {
		return DeliveryPruneBatch{Cursor: cursor, Done: true}, nil
	}
	if err := q.QueryRow(ctx, p.delete, cursor, limit, acked, dead, *shortest).Scan(&b.Acked, &b.Dead, &b.Cursor, &b.Done); err != nil {
		return DeliveryPruneBatch{}, fmt.Errorf("prune deliveries after id %d (limit %d): %w", cursor, limit, err)
	}
	return b, nil
}

// DeliveryAdmin is the operator CLI's SQL for <schema>.deliveries: the
// figures `outboxkeeper status` shows, and listing and retrying dead
// rows. It reads no payload (the operator role cannot), and each statement
// stays on a partial index: open rows, or dead ones.
type DeliveryAdmin struct {
	counts     string
	listDead   string
	retryIDs   string
	retryOlder string
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
}

// NewDeliveryAdmin renders the statements for schema.
func NewDeliveryAdmin(schema Schema) *DeliveryAdmin {
	t := schema.Table("deliveries")
	// The retry: the same columns the sweep's reset moves (§6), back to
	// where a fresh delivery starts. redeliveries goes back to 0: left as
	// it was, the row would be dead again on its next stuck push.
	// delivered_at goes too, as in the sweep's reset (no push is in
	// flight); attempts stays, as the row's history.
	const retrySet = `state = 'pending', redeliveries = 0, dead_at = NULL, delivered_at = NULL`
	return &DeliveryAdmin{
		// Two scans on two partial indexes (open rows, dead rows), never
		// the acked history. $1 is the stuck threshold in microseconds.
		counts: `SELECT o.pending, o.delivered, o.stuck, o.oldest_open_s, d.dead, d.oldest_dead_s
			FROM (SELECT count(*) FILTER (WHERE state = 'pending') AS pending,
					count(*) FILTER (WHERE state = 'delivered') AS delivered,
					count(*) FILTER (WHERE state = 'delivered' AND delivered_at < now() - $1::bigint * interval '1 microsecond') AS stuck,
					extract(epoch FROM now() - min(created_at))::float8 AS oldest_open_s
				FROM ` + t + ` WHERE state IN ('pending', 'delivered')) o,
			(SELECT count(*) AS dead, extract(epoch FROM now() - min(dead_at))::float8 AS oldest_dead_s
				FROM ` + t + ` WHERE state = 'dead') d`,
		// Newest first, through deliveries_dead_idx. $1: dead longer than
		// this many microseconds (0: any).
		listDead: `SELECT id, recipient, kind, tenant_id, attempts, redeliveries, created_at, delivered_at, dead_at
			FROM ` + t + `
			WHERE state = 'dead' AND dead_at <= now() - $1::bigint * interval '1 microsecond'
			ORDER BY dead_at DESC, id DESC LIMIT $2`,
		// By id, one compare-and-set: only rows still dead move (a row a
		// relay or another operator revived meanwhile is left alone). The
		// answer names every id asked for, whether it moved, and the state
		// it had (in the statement's snapshot, before the update: the
		// reason one did not move).
		retryIDs: `WITH moved AS (
				UPDATE ` + t + ` SET ` + retrySet + `
				WHERE id = ANY ($1::bigint[]) AND state = 'dead'
				RETURNING id)
			SELECT a.id, m.id IS NOT NULL, coalesce(d.state, '')
			FROM unnest($1::bigint[]) AS a(id)
			LEFT JOIN moved m ON m.id = a.id
			LEFT JOIN ` + t + ` d ON d.id = a.id
			ORDER BY a.id`,
		// Every dead row older than $1 microseconds, oldest first, at most
		// $2 in one statement: picked under FOR UPDATE SKIP LOCKED (a row
		// the sweep or a relay holds is theirs this instant), moved only
		// if still dead. It answers with how many moved and how many more
		// match (the statement's snapshot counts the moved ones too).
		retryOlder: `WITH picked AS MATERIALIZED (
				SELECT id FROM ` + t + `
				WHERE state = 'dead' AND dead_at <= now() - $1::bigint * interval '1 microsecond'
				ORDER BY dead_at, id LIMIT $2
				FOR UPDATE SKIP LOCKED
			), moved AS (
				UPDATE ` + t + ` SET ` + retrySet + `
				WHERE id = ANY (ARRAY(SELECT id FROM picked)) AND state = 'dead'
				RETURNING id)
			SELECT (SELECT count(*) FROM moved),
				(SELECT count(*) FROM ` + t + ` WHERE state = 'dead' AND dead_at <= now() - $1::bigint * interval '1 microsecond')
					- (SELECT count(*) FROM moved)`,
	}
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
	if err := q.QueryRow(ctx, a.counts, stuckAfter.Microseconds()).Scan(&c.Pending, &c.Delivered, &c.Stuck,
		&c.OldestOpenSeconds, &c.Dead, &c.OldestDeadSeconds); err != nil {
		return DeliveryCounts{}, fmt.Errorf("count deliveries: %w", err)
	}
	return c, nil
}

// ListDead returns up to limit dead rows dead for at least olderThan,
// newest first.
func (a *DeliveryAdmin) ListDead(ctx context.Context, q Querier, olderThan time.Duration, limit int) ([]DeadDelivery, error) {
	rows, err := q.Query(ctx, a.listDead, olderThan.Microseconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("list dead deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[DeadDelivery])
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
	rows, err := q.Query(ctx, a.retryIDs, ids)
	if err != nil {
		return nil, fmt.Errorf("retry dead deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[RetryOutcome])
	if err != nil {
		return nil, fmt.Errorf("retry dead deliveries: %w", err)
	}
	return out, nil
}

// RetryOlderThan puts up to limit rows dead for at least olderThan back
// to pending, oldest first, in one statement; it returns how many moved
// and how many more such rows remain.
func (a *DeliveryAdmin) RetryOlderThan(ctx context.Context, q Querier, olderThan time.Duration, limit int) (reset, remaining int64, err error) {
	if err := q.QueryRow(ctx, a.retryOlder, olderThan.Microseconds(), limit).Scan(&reset, &remaining); err != nil {
		return 0, 0, fmt.Errorf("retry dead deliveries: %w", err)
	}
	return reset, remaining, nil
}
