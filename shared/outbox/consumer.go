package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// MaxRead is the most events one read returns (read_events caps it), so
// one read is always a bounded amount of work.
const MaxRead = 10000

// MaxConsumerName is the longest consumer name, in bytes, that
// <schema>.commit_position takes (migration 0016: the name is the
// consumers table's primary key, and a btree entry must fit a third of a
// page); Consume refuses a longer one before it sends anything.
const MaxConsumerName = 200

// validConsumerName says why commit_position would refuse name, or nil.
func validConsumerName(name string) error {
	switch {
	case name == "":
		return errors.New("the consumer name must not be empty")
	case len(name) > MaxConsumerName:
		// Quote its start only, cut on a character boundary.
		keep := 40
		for keep > 0 && !utf8.RuneStart(name[keep]) {
			keep--
		}
		return fmt.Errorf("the consumer name %q... is %d bytes long, more than %d", name[:keep], len(name), MaxConsumerName)
	}
	return nil
}

// ConsumerOptions configure Consume.
type ConsumerOptions struct {
	// Name is the consumer's row in <schema>.consumers. Required, at most
	// MaxConsumerName bytes. While it is registered, the prune function never deletes an event it has not
	// passed; delete the row when the consumer is retired.
	Name string
	// Start is the position a consumer that is not registered yet begins
	// after (0, the default: from the first event kept). A registered
	// consumer carries on from its stored position, or from Start if that
	// is later (a position only moves forward).
	Start int64
	// Batch is the most events handed to one call of the handler
	// (default 100, at most MaxRead).
	Batch int
	// Poll is how long an idle consumer waits before it reads again when
	// nothing wakes it: default 1s, or 30s with Listen (the notification
	// wakes it at once; the poll covers a watermark that moved over a
	// pruned prefix, which notifies nobody, and a lost connection).
	Poll time.Duration
	// Listen, when set, dials a connection of its own on which the
	// consumer LISTENs to <schema>_events, so it wakes the moment a
	// transaction that published commits (or placeholders close a gap)
	// instead of at its next poll. It must reach PostgreSQL directly or
	// through a pooler in session mode: LISTEN is session state, which a
	// transaction-mode pooler (PgBouncer, RDS Proxy) cannot keep. If it
	// fails, the consumer polls and dials again at its next idle moment.
	Listen func(ctx context.Context) (*pgx.Conn, error)
}

func (c ConsumerOptions) withDefaults() ConsumerOptions {
	c.Batch = min(cmp.Or(c.Batch, 100), MaxRead)
	if c.Poll == 0 {
		c.Poll = time.Second
		if c.Listen != nil {
			c.Poll = 30 * time.Second
		}
	}
	return c
}

// Consume runs the consumer Name until ctx ends or handle fails: it reads
// the events after its position with read_events (in sequence order, up
// to the first missing sequence not yet proven, placeholders included and
// marked), hands each non-empty batch to handle, and commits the position
// of the batch's last event once handle returns nil — at-least-once: a
// batch whose handling failed, or whose commit was lost, is handed over
// again. When nothing is left to read it waits for a notification (see
// Listen) or its poll.
//
// It returns ctx's error when ctx ends, or handle's error (wrapped, for
// errors.Is) with the position left where it was.
func (o *Outbox) Consume(ctx context.Context, opts ConsumerOptions, handle func(ctx context.Context, events []Event) error) error {
	return o.consume(ctx, opts, handle)
}

func (c *core) consume(ctx context.Context, opts ConsumerOptions, handle func(ctx context.Context, events []Event) error) error {
	if opts.Name == "" {
		return errors.New("outbox: Consume: the consumer needs a Name")
	}
	if err := validConsumerName(opts.Name); err != nil {
		return fmt.Errorf("outbox: Consume: Name: %w", err)
	}
	if opts.Start < 0 || opts.Batch < 0 || opts.Poll < 0 {
		return errors.New("outbox: Consume: Start, Batch and Poll must not be negative")
	}
	opts = opts.withDefaults()
	// Registers a new consumer at Start and answers a registered one's
	// stored position (positions never move back), in one call that
	// needs no privilege on the table itself.
	position, err := c.commit(ctx, opts.Name, opts.Start)
	if err != nil {
		return fmt.Errorf("outbox: register: %w", err)
	}
	w := &waker{listen: opts.Listen, channel: c.schema.EventsChannel()}
	defer w.close()
	for {
		// LISTEN before the read that may come back empty, so a commit
		// between that read and the wait is not missed.
		w.ensure(ctx)
		events, err := c.readContiguous(ctx, position, opts.Batch)
		if err != nil {
			return ctxOr(ctx, err)
		}
		if len(events) == 0 {
			if err := w.wait(ctx, opts.Poll); err != nil {
				return err
			}
			continue
		}
		if err := handle(ctx, events); err != nil {
			return fmt.Errorf("outbox: consumer %s: handling events %d..%d: %w",
				opts.Name, events[0].Sequence, events[len(events)-1].Sequence, err)
		}
		last := events[len(events)-1].Sequence
		if position, err = c.commit(ctx, opts.Name, last); err != nil {
			return ctxOr(ctx, fmt.Errorf("outbox: %w", err))
		}
	}
}

// commit records position for consumer name (registering it) and returns
// the position stored, which is higher than position when a later one was
// committed already.
func (c *core) commit(ctx context.Context, name string, position int64) (int64, error) {
	var stored int64
	if err := queryOne(ctx, c.pool, c.sql.commitPosition, pgx.StrictNamedArgs{"name": name, "position": position}, &stored); err != nil {
		return 0, fmt.Errorf("commit position %d for consumer %q: %w", position, name, err)
	}
	return stored, nil
}

// ctxOr is ctx's error when ctx ended (the cause of err), else err.
func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// waker is the consumer's own LISTEN connection, when it has one.
type waker struct {
	listen  func(ctx context.Context) (*pgx.Conn, error)
	channel string
	conn    *pgx.Conn
}

// ensure dials and LISTENs when a listener is configured and none is open.
// A failure leaves the consumer polling.
func (w *waker) ensure(ctx context.Context) {
	if w.listen == nil || w.conn != nil {
		return
	}
	conn, err := w.listen(ctx)
	if err != nil {
		return
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{w.channel}.Sanitize()); err != nil {
		_ = conn.Close(ctx)
		return
	}
	w.conn = conn
}

// wait returns after a notification, after d, or with ctx's error. A
// listener that failed is closed and dialled again before the next read.
func (w *waker) wait(ctx context.Context, d time.Duration) error {
	if w.conn == nil {
		// No listener: a plain wait (an unfired time.After is collected).
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := w.conn.WaitForNotification(wctx)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil && wctx.Err() == nil:
		// The connection failed, not the poll's timeout (after which
		// pgx's connection stays usable): dial afresh.
		w.close()
	}
	return nil
}

func (w *waker) close() {
	if w.conn != nil {
		_ = w.conn.Close(context.Background())
		w.conn = nil
	}
}
