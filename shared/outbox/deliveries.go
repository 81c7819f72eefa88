package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Delivery is one row of the delivery outbox.
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

// ErrLostRace is matched (errors.Is) by every *StateConflictError.
var ErrLostRace = errors.New("delivery state changed concurrently")

// StateConflictError is a lost compare-and-set on a delivery: the row was
// not in the state the transition starts from (another relay, an ack or
// the sweep moved it).
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

// Is makes errors.Is(err, ErrLostRace) true.
func (e *StateConflictError) Is(target error) bool { return target == ErrLostRace }

// NewDelivery is a row to enqueue.
type NewDelivery struct {
	Recipient string
	Kind      string
	TenantID  *string
	Payload   []byte
}

// scan is the order of the columns of deliveries.sql's claim_pending.
func (d *Delivery) scan(scan func(dest ...any) error) error {
	return scan(&d.ID, &d.Recipient, &d.Kind, &d.TenantID, &d.Payload, &d.State, &d.Attempts, &d.Redeliveries,
		&d.CreatedAt, &d.DeliveredAt, &d.AckedAt, &d.DeadAt)
}

// Enqueue adds a pending delivery. Pass the application's transaction to
// enqueue atomically with its own writes, or nil to use the Outbox's DB.
func (o *Outbox) Enqueue(ctx context.Context, tx pgx.Tx, d NewDelivery) (int64, error) {
	return o.enqueue(ctx, o.pgxOr(tx), d)
}

// ClaimPending locks up to limit pending rows for tx (FOR UPDATE SKIP
// LOCKED): concurrent relays claim disjoint rows.
func (o *Outbox) ClaimPending(ctx context.Context, tx pgx.Tx, limit int) ([]Delivery, error) {
	if tx == nil {
		return nil, errors.New("outbox: ClaimPending needs a transaction to hold its row locks")
	}
	return o.claimPending(ctx, pgxExecutor{tx}, limit)
}

// MarkDelivered moves a delivery pending→delivered (attempts+1,
// delivered_at now). A lost race returns a *StateConflictError.
func (o *Outbox) MarkDelivered(ctx context.Context, tx pgx.Tx, id int64) error {
	return o.move(ctx, o.pgxOr(tx), o.sql.markDelivered, id)
}

// Ack moves a delivery delivered→acked. A lost race (the sweep reset it,
// or it was already acked) returns a *StateConflictError.
func (o *Outbox) Ack(ctx context.Context, tx pgx.Tx, id int64) error {
	return o.move(ctx, o.pgxOr(tx), o.sql.ack, id)
}

// pgxOr is tx, or the Outbox's own DB when tx is nil.
func (o *Outbox) pgxOr(tx pgx.Tx) executor {
	if tx == nil {
		return o.pool
	}
	return pgxExecutor{tx}
}

func (c *core) enqueue(ctx context.Context, ex executor, d NewDelivery) (int64, error) {
	payload := d.Payload
	if payload == nil {
		payload = []byte{}
	}
	args := pgx.StrictNamedArgs{"recipient": d.Recipient, "kind": d.Kind, "tenant_id": d.TenantID, "payload": payload}
	var id int64
	if err := queryOne(ctx, ex, c.sql.enqueue, args, &id); err != nil {
		return 0, fmt.Errorf("enqueue delivery to %s: %w", d.Recipient, err)
	}
	return id, nil
}

func (c *core) claimPending(ctx context.Context, ex executor, limit int) ([]Delivery, error) {
	out, err := queryAll[Delivery](ctx, ex, c.sql.claimPending, pgx.StrictNamedArgs{"limit": limit})
	if err != nil {
		return nil, fmt.Errorf("claim pending deliveries: %w", err)
	}
	return out, nil
}

// transition is one compare-and-set of a delivery's state: its statement
// (which takes @id) and the states it moves between.
type transition struct {
	sql      string
	from, to string
}

// move runs one compare-and-set and turns "0 rows" into a typed error
// naming the state actually found.
func (c *core) move(ctx context.Context, ex executor, t transition, id int64) error {
	n, err := ex.exec(ctx, t.sql, pgx.StrictNamedArgs{"id": id})
	if err != nil {
		return fmt.Errorf("delivery %d %s→%s: %w", id, t.from, t.to, err)
	}
	if n == 1 {
		return nil
	}
	var actual string
	if err := queryOne(ctx, ex, c.sql.stateOf, pgx.StrictNamedArgs{"id": id}, &actual); err != nil && !errors.Is(err, errNoRows) {
		return fmt.Errorf("delivery %d %s→%s: read state: %w", id, t.from, t.to, err)
	}
	return &StateConflictError{ID: id, From: t.from, To: t.to, Actual: actual}
}
