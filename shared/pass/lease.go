package pass

import (
	"cmp"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
)

// The lease: one working pass per name, a row of <schema>.leases taken,
// renewed and given up by compare-and-set statements on the database
// clock (leases.sql). It runs out on its own a few ticks after its last
// renewal, so a crashed pass blocks the next for seconds, not forever.
//
// The hand-over: a watching pass that finds the lease held registers as
// its successor and polls. The holder sees the registration at its next
// tick and, in one statement, writes its state and makes the successor
// the owner, naming itself in handed_by. It then keeps watching, read-only,
// until the successor acts as owner: the successor's first renewal clears
// handed_by. Only then does the holder end. A successor that died on the
// way (after registering, after being handed the lease, before its first
// renewal) never clears it, and the holder takes the lease back and
// carries on. So consecutive invocations overlap by a tick, and no moment
// goes unwatched while either is alive.
//
// A lease protects efficiency, not soundness: a pass's state writes ride
// on lease statements (Ride) and so happen only while it owns the lease,
// but two passes working at once would only repeat each other's reads.

// LeaseTicks and MinLeaseTTL give the lease period: LeaseTicks ticks after
// its last renewal, never less than MinLeaseTTL, which one slow statement
// on a loaded server may take. A holder renews it every third of that, so
// only a pass that crashed, or one stuck in a statement that long, lets it
// run out.
const (
	LeaseTicks  = 4
	MinLeaseTTL = time.Second
)

// LeaseTTL is the lease period for a tick.
func LeaseTTL(tick time.Duration) time.Duration { return max(LeaseTicks*tick, MinLeaseTTL) }

// LeasePoll is how often a waiting successor looks at the lease, and how
// often a holder that handed it over looks for the successor's first
// renewal: the holder hands over at its next tick, so waiting costs at
// most a tick and a poll.
const LeasePoll = 100 * time.Millisecond

// SuccessorTTL is how long one registration as successor lasts; the waiter
// refreshes it every poll, so a waiter that died is ignored within it.
const SuccessorTTL = 5 * LeasePoll

// MinAck is the least a holder waits for its successor's first renewal: a
// loaded database or a pooler may take that for a tick's few statements.
const MinAck = 300 * time.Millisecond

// AckWindow is how long a holder that handed its lease over waits for the
// successor's first renewal before it takes the lease back: the successor
// sees the hand-over within a poll and renews at the end of its first
// step.
func AckWindow(tick time.Duration) time.Duration { return max(tick, MinAck) + LeasePoll }

// ErrLeaseLost is another pass owning the lease now (this one's ran out
// while a statement was blocked, or it was taken back from it).
var ErrLeaseLost = errors.New("lease lost to another pass")

//go:embed leases.sql
var leasesFile embed.FS

var leasesSQL = sqltext.MustParse(leasesFile, "leases.sql")

// LeaseStep is a step of taking the lease, for Lease.OnStep.
type LeaseStep int

const (
	LeasePolling    LeaseStep = iota // before a waiting pass polls the lease again
	LeaseRegistered                  // a watching pass found the lease held and registered as successor
	LeaseTaken                       // the pass took the lease (free, expired, or handed to it)
)

// Step is a lease statement a pass's own may ride on.
type Step int

const (
	StepAcquire  Step = iota // returns took, handed
	StepRenew                // returns successor_waiting
	StepHandOver             // returns handed
	StepFinish               // returns released
)

// LeaseSpec names a lease and says what its statements carry.
type LeaseSpec struct {
	// Schema holds the leases table.
	Schema string
	// Name is the lease's: "fill", "relay:<RELAY_NAME>", "deliver".
	Name string
	// Probe is one scalar SQL expression ({{schema}} templated) read by
	// every poll, so a watching tick is one statement: the fill's
	// allocation head. Empty for none.
	Probe string
	// Tick is the pass's tick: the hand-over waits AckWindow(Tick).
	Tick time.Duration
	// TTL is the lease period; LeaseTTL(Tick) when zero.
	TTL time.Duration
}

// Lease is one named lease's statements, rendered once.
type Lease struct {
	name     string
	ttl      time.Duration
	ack      time.Duration
	steps    map[Step]string
	poll     string
	handedTo string
	takeBack string
	// OnStep, when set, runs at the steps of taking the lease, with the
	// pass's lease token: tests stop a successor exactly there.
	OnStep func(step LeaseStep, owner string)
}

// NewLease renders spec's statements.
func NewLease(spec LeaseSpec) *Lease {
	probe := "NULL"
	if spec.Probe != "" {
		probe = "(" + sqltext.Render(spec.Probe, spec.Schema) + ")"
	}
	return &Lease{
		name: spec.Name,
		ttl:  cmp.Or(spec.TTL, LeaseTTL(spec.Tick)),
		ack:  AckWindow(spec.Tick),
		steps: map[Step]string{
			StepAcquire: leasesSQL.Statement("acquire", spec.Schema), StepRenew: leasesSQL.Statement("renew", spec.Schema), StepHandOver: leasesSQL.Statement("hand_over", spec.Schema), StepFinish: leasesSQL.Statement("finish", spec.Schema),
		},
		poll:     strings.Replace(leasesSQL.Statement("poll", spec.Schema), "SELECT NULL AS probe", "SELECT "+probe+" AS probe", 1),
		handedTo: leasesSQL.Statement("handed_to", spec.Schema),
		takeBack: leasesSQL.Statement("take_back", spec.Schema),
	}
}

// TTL is the lease period.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Ride is a lease step with a pass's own statement riding on it.
type Ride struct {
	step Step
	sql  string
}

// Ride composes, once, step with rider: `WITH lease AS (<step>) <rider>`.
// rider reads the step's columns from lease first (`lease.*, ...`), then
// its own; it is named first in pg_stat_activity. An empty rider is the
// step alone.
func (l *Lease) Ride(step Step, rider string) Ride {
	if rider == "" {
		return Ride{step: step, sql: l.steps[step]}
	}
	tag, body := "", rider
	if strings.HasPrefix(rider, "/*") {
		if end := strings.Index(rider, "*/"); end > 0 {
			tag, body = rider[:end+2]+" ", rider[end+2:]
		}
	}
	return Ride{step: step, sql: tag + "WITH lease AS (" + l.steps[step] + ")" + body}
}

// Reader scans a ride's row: the lease's columns into lease, then the
// rider's own.
type Reader func(row pgx.Row, lease ...any) error

func scanOnly(row pgx.Row, lease ...any) error { return row.Scan(lease...) }

// Holding is one pass's hold on a lease.
type Holding struct {
	l   *Lease
	run *Run
	// Owner is the pass's lease token, unique per pass.
	Owner string
	// Held says the pass holds the lease.
	Held bool
	// Waiting says the last attempt to take the lease found it held.
	Waiting bool
	// Successor says a live successor waits: hand over.
	Successor bool
	// WaitMS is how long a watching pass waited for the lease.
	WaitMS int64
	// HandedOver says the pass handed the lease to a successor and saw it
	// act as owner (or the budget ended while it watched).
	HandedOver bool
	// TakenBack counts hand-overs taken back from a successor that never
	// acted as owner.
	TakenBack int

	// unknown: the last statement that takes the lease was lost with its
	// connection, so the pass may hold it without knowing.
	unknown bool
	// ackOwed: the lease was handed to this pass, and its predecessor
	// watches for its first renewal, which is therefore due at once.
	ackOwed bool
	renewed time.Time
}

// Hold is run's hold on the lease, not yet taken.
func (l *Lease) Hold(run *Run) *Holding {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return &Holding{l: l, run: run, Owner: hex.EncodeToString(b)}
}

func (h *Holding) args(extra pgx.NamedArgs) pgx.NamedArgs {
	args := pgx.NamedArgs{"name": h.l.name, "owner": h.Owner, "lease_ms": h.l.ttl.Milliseconds()}
	for k, v := range extra {
		args[k] = v
	}
	return args
}

func (h *Holding) step(ev LeaseStep) {
	if h.l.OnStep != nil {
		h.l.OnStep(ev, h.Owner)
	}
}

// AcquireParams say how Acquire takes the lease.
type AcquireParams struct {
	// Watch: a pass that finds the lease held registers as successor and
	// waits to be handed it; otherwise it returns at once.
	Watch bool
	// Ride is a StepAcquire with the pass's state read riding on it, Args
	// its own arguments, Read the reader of its row (nil: the lease's
	// columns only).
	Ride Ride
	Args pgx.NamedArgs
	Read Reader
}

// Acquire takes the lease, or (p.Watch) registers as successor and waits
// to be handed it while the budget lasts. Each attempt runs p.Ride and
// hands its row to p.Read: a pass loads its state in the same statement,
// whether it took the lease or not.
func (h *Holding) Acquire(ctx context.Context, p AcquireParams) error {
	read := orScan(p.Read)
	since, waited := h.run.kit.Now(), h.WaitMS
	a := h.args(p.Args)
	a["wait"], a["successor_ms"] = p.Watch, SuccessorTTL.Milliseconds()
	for polls := 0; ; polls++ {
		if polls > 0 {
			h.WaitMS = waited + h.run.kit.Now().Sub(since).Milliseconds()
			h.step(LeasePolling)
		}
		var took, handed bool
		err := read(h.run.Q.QueryRow(ctx, p.Ride.sql, a), &took, &handed)
		if h.unknown = outcomeUnknown(err); err != nil {
			return fmt.Errorf("take the lease: %w", err)
		}
		if took {
			h.Held, h.Waiting, h.renewed, h.ackOwed = true, false, h.run.kit.Now(), handed
			h.step(LeaseTaken)
			return nil
		}
		if p.Watch {
			h.step(LeaseRegistered)
		}
		h.Waiting = true
		if !p.Watch || !h.run.Pause(ctx, LeasePoll) {
			// One working pass per name; a pass that does not watch
			// returns at once.
			return nil
		}
	}
}

func orScan(read Reader) Reader {
	if read == nil {
		return scanOnly
	}
	return read
}

// Keep runs work while the pass holds the lease, taking it first (Acquire):
// work returning ErrLeaseLost (taken back by a predecessor that missed the
// first renewal, or taken over while a statement was blocked past the
// lease) makes a watching pass wait to be handed it again, so it still
// watches if the other pass ends.
func (h *Holding) Keep(ctx context.Context, watch bool, acquire func(ctx context.Context) error, work func(ctx context.Context) error) error {
	for {
		if err := acquire(ctx); err != nil || !h.Held {
			return err
		}
		err := work(ctx)
		if !errors.Is(err, ErrLeaseLost) {
			return err
		}
		h.Held, h.ackOwed, h.Waiting = false, false, true
		if !watch || !h.run.Pause(ctx, LeasePoll) {
			return nil
		}
	}
}

// Poll is a holder's tick: whether it still holds the lease (held false:
// the step ends, another pass has it) and whether a successor waits, with
// the probe scanned into probe (nil to skip it).
func (h *Holding) Poll(ctx context.Context, probe any) (held bool, err error) {
	var successor bool
	err = h.run.Q.QueryRow(ctx, h.l.poll, pgx.NamedArgs{"name": h.l.name, "owner": h.Owner}).Scan(probe, &held, &successor)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("poll the lease: %w", err)
	}
	h.Successor = successor
	return held, nil
}

// Look is Poll with a yes-or-no probe (is there work?), for a pass whose
// step ends when another pass has the lease: ErrLeaseLost then.
func (h *Holding) Look(ctx context.Context) (bool, error) {
	var found bool
	held, err := h.Poll(ctx, &found)
	if err != nil {
		return false, err
	}
	if !held {
		return false, ErrLeaseLost
	}
	return found, nil
}

// RenewDue says the lease wants renewing: a third of its period has
// passed since the last renewal, or a predecessor waits for the first.
func (h *Holding) RenewDue() bool {
	return h.ackOwed || h.run.kit.Now().Sub(h.renewed) >= h.l.ttl/3
}

// Renew renews the lease with ride (a StepRenew the pass's state write
// rides on): ErrLeaseLost when another pass owns it.
func (h *Holding) Renew(ctx context.Context, ride Ride, args pgx.NamedArgs, read Reader) error {
	var successor bool
	err := orScan(read)(h.run.Q.QueryRow(ctx, ride.sql, h.args(args)), &successor)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrLeaseLost
	}
	if err != nil {
		return err
	}
	h.Successor = h.Successor || successor
	h.renewed, h.ackOwed = h.run.kit.Now(), false
	return nil
}

// HandOver gives the lease to the waiting successor with ride (a
// StepHandOver the pass's state rides on), then watches, read-only, until
// the successor acts as owner (its first renewal): done is true then, or
// when the budget ends first. A successor that never renews (it died after
// registering, after being handed the lease, or before its first renewal)
// has the lease taken back after AckWindow, and the pass carries on as
// before (done false).
func (h *Holding) HandOver(ctx context.Context, ride Ride, args pgx.NamedArgs, read Reader) (done bool, err error) {
	h.Successor = false
	var handed bool
	err = orScan(read)(h.run.Q.QueryRow(ctx, ride.sql, h.args(args)), &handed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, ErrLeaseLost
	}
	if err != nil {
		return false, fmt.Errorf("hand the lease over: %w", err)
	}
	h.renewed = h.run.kit.Now()
	if !handed {
		return false, nil // the registration lapsed since the tick
	}
	h.Held, h.HandedOver = false, true
	for {
		if !h.run.Pause(ctx, LeasePoll) {
			// The budget ends first: the successor has the lease, and if
			// it died, the lease runs out on its own.
			return true, ctx.Err()
		}
		w, err := h.handedTo(ctx)
		switch {
		case err != nil && Transient(err) && ctx.Err() == nil:
			// Still watching: the next poll reads again.
			h.run.Retries++
			continue
		case err != nil:
			return true, err
		case w.owned:
			// A take-back whose answer was lost with its connection.
		case !w.pending:
			return true, nil
		case !w.due:
			continue
		default:
			ok, err := h.takeBack(ctx)
			h.unknown = outcomeUnknown(err)
			if err != nil && Transient(err) && ctx.Err() == nil {
				h.run.Retries++
				continue
			}
			if err != nil || !ok {
				return true, err // !ok: it renewed just now
			}
		}
		// The state is the one the hand-over wrote: a successor that
		// wrote anything had renewed.
		h.unknown = false
		h.run.kit.Warn(ctx, "the successor never acted as owner: took the lease back", slog.Duration("waited", h.l.ack))
		h.Held, h.renewed, h.HandedOver = true, h.run.kit.Now(), false
		h.TakenBack++
		return false, nil
	}
}

// handedOver is what a holder that handed its lease over reads while it
// waits.
type handedOver struct{ owned, pending, due bool }

func (h *Holding) handedTo(ctx context.Context) (handedOver, error) {
	var w handedOver
	err := h.run.Q.QueryRow(ctx, h.l.handedTo, pgx.NamedArgs{"name": h.l.name, "owner": h.Owner, "ack_ms": h.l.ack.Milliseconds()}).
		Scan(&w.owned, &w.pending, &w.due)
	if errors.Is(err, pgx.ErrNoRows) {
		return handedOver{}, nil // no lease row at all: nothing left to watch
	}
	if err != nil {
		return w, fmt.Errorf("watch the lease handed over: %w", err)
	}
	return w, nil
}

// takeBack takes back a lease the pass handed over and whose successor
// never renewed it; ok is false when the successor renewed first.
func (h *Holding) takeBack(ctx context.Context) (ok bool, err error) {
	tag, err := h.run.Q.Exec(ctx, h.l.takeBack, h.args(nil))
	if err != nil {
		return false, fmt.Errorf("take the lease back: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Rider is a lease statement with what of the pass's state rides on it.
type Rider struct {
	Ride Ride
	Args pgx.NamedArgs
	// Read scans the row (the lease's columns first); nil scans only them.
	Read Reader
}

// Finish is a lease holder's finish rule (as Run.Finish): the lease given
// back with r (Close) whatever err the work ended with; the work's error
// wins, and a budget error of either is a normal end (Run.Absorb). fctx
// is the context of any statement the pass sends after it.
func (h *Holding) Finish(ctx context.Context, err error, r Rider) (fctx context.Context, gaveBack bool, _ error) {
	err = h.run.Absorb(err)
	fctx = h.run.Finishing(ctx)
	gaveBack, ferr := h.Close(fctx, r.Ride, r.Args, r.Read)
	if err == nil {
		err = h.run.Absorb(ferr)
	}
	return fctx, gaveBack, err
}

// Close gives the lease back on the pass's way out, errors included, in
// Run.Finishing's context: with ride (a StepFinish the pass's state rides
// on) when the pass holds it; bare when it may hold it without knowing
// (the statement that took it was lost with its connection), so the next
// pass never waits out its expiry. Each is sent again after a transient
// error (Run.LastStatement). gaveBack says the lease is no longer this
// pass's (released, or handed over); a lease another pass took meanwhile
// is not an error.
func (h *Holding) Close(fctx context.Context, ride Ride, args pgx.NamedArgs, read Reader) (gaveBack bool, err error) {
	gaveBack = h.HandedOver
	switch {
	case h.Held:
		err = h.run.LastStatement(func() error {
			var released bool
			err := orScan(read)(h.run.Q.QueryRow(fctx, ride.sql, h.args(args)), &released)
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrLeaseLost
			}
			if err != nil {
				return fmt.Errorf("release the lease: %w", err)
			}
			return nil
		})
		if err == nil {
			h.Held, gaveBack = false, true
		}
		if errors.Is(err, ErrLeaseLost) {
			err = nil
		}
	case h.unknown:
		if rerr := h.run.LastStatement(func() error {
			_, err := h.run.Q.Exec(fctx, h.l.steps[StepFinish], h.args(nil))
			return err
		}); rerr != nil {
			h.run.kit.Warn(fctx, "could not give the lease back; it expires on its own", slog.String("error", rerr.Error()))
		}
	}
	return gaveBack, err
}

// outcomeUnknown says a statement that takes the lease may have done so
// although the pass did not hear back: it reached the server, or may have,
// and no answer came (the connection was lost, or the rider read no row).
// A server's error, or a statement never sent, took nothing.
func outcomeUnknown(err error) bool {
	var pgErr *pgconn.PgError
	return err != nil && !errors.Is(err, ErrNotSent) && !errors.As(err, &pgErr)
}
