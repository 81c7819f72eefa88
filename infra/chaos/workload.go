package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// errRollback makes InTx roll back on purpose.
var errRollback = errors.New("chaos: roll back")

// workload is the applications around the outbox: writers of every kind,
// a relay that loses acks, and a consumer that checks the stream.
type workload struct {
	l        *ledger
	ob       *outbox.Outbox
	pool     *pgxpool.Pool
	url      string
	reporter outbox.RollbackReporter
	// live is the holder's open transaction, for the hostile reports that
	// name a live writer's row.
	liveMu  sync.Mutex
	liveSeq []int64
	liveXID uint64
	// lossPct of acks the relay loses.
	lossPct atomic.Int32
	// lostAcks counts pushes never acknowledged, which the sweep must
	// bring back.
	lostAcks atomic.Int64
}

// payloadsFor makes n distinct payloads for writer w.
func payloadsFor(w int, n *int, k int) ([]any, []string) {
	docs, texts := make([]any, k), make([]string, k)
	for i := range k {
		*n++
		texts[i] = fmt.Sprintf(`{"n": %d, "w": %d}`, *n, w)
		docs[i] = json.RawMessage(texts[i])
	}
	return docs, texts
}

// libraryWriter publishes through shared/outbox's InTx: commits with a
// delivery, rollbacks that InTx reports, and savepoints rolled back inside
// committed transactions (reported after the commit).
func (w *workload) libraryWriter(ctx context.Context, id int, batch int) {
	rng := rand.New(rand.NewPCG(uint64(id), 1))
	n := 0
	for ctx.Err() == nil {
		k := 1 + rng.IntN(batch)
		docs, texts := payloadsFor(id, &n, k)
		var seqs, lost []int64
		var at time.Time
		switch p := rng.IntN(100); {
		case p < 70:
			err := w.ob.InTx(context.WithoutCancel(ctx), func(ctx context.Context, tx *outbox.Tx) error {
				var err error
				if seqs, err = tx.Publish(ctx, "chaos", docs...); err != nil {
					return err
				}
				_, err = w.ob.Enqueue(ctx, tx.Tx, outbox.NewDelivery{Recipient: "chaos", Kind: "event", Payload: []byte(texts[0])})
				return err
			})
			w.settle(seqs, texts, 0, err, "library")
		case p < 85:
			err := w.ob.InTx(context.WithoutCancel(ctx), func(ctx context.Context, tx *outbox.Tx) error {
				var err error
				if seqs, err = tx.Publish(ctx, "chaos", docs...); err != nil {
					return err
				}
				at = time.Now()
				return errRollback
			})
			if errors.Is(err, errRollback) {
				w.l.abandon(seqs, at, true, "reported")
			} else {
				w.l.fail("library rollback", err)
				w.l.abandon(seqs, time.Now(), false, "failed")
			}
		default:
			var kept []int64
			err := w.ob.InTx(context.WithoutCancel(ctx), func(ctx context.Context, tx *outbox.Tx) error {
				var err error
				if kept, err = tx.Publish(ctx, "chaos", docs...); err != nil {
					return err
				}
				spDocs, _ := payloadsFor(id, &n, 1)
				if err := tx.Savepoint(ctx, func(ctx context.Context, sp *outbox.Tx) error {
					var err error
					if lost, err = sp.Publish(ctx, "chaos.extra", spDocs...); err != nil {
						return err
					}
					return errRollback
				}); !errors.Is(err, errRollback) {
					return err
				}
				at = time.Now()
				return nil
			})
			w.settle(kept, texts, 0, err, "savepoint")
			if err == nil {
				w.l.abandon(lost, at, true, "savepoint")
			} else {
				w.l.abandon(lost, time.Now(), false, "failed")
			}
		}
		_ = pass.Sleep(ctx, time.Duration(5+rng.IntN(20))*time.Millisecond)
	}
}

// settle records how a transaction that should have committed ended: a
// COMMIT whose answer was lost leaves its sequences in doubt; any error
// before it, abandoned.
func (w *workload) settle(seqs []int64, texts []string, xid uint64, err error, where string) {
	switch {
	case err == nil:
		w.l.commit(seqs, texts[:len(seqs)], xid)
	case isCommitError(err):
		w.l.fail(where+" commit", err)
		w.l.doubt(seqs, texts[:len(seqs)])
	default:
		w.l.fail(where, err)
		w.l.abandon(seqs, time.Now(), false, "failed")
	}
}

// isCommitError says err came from the COMMIT itself, whose outcome the
// client cannot know when the connection went away: a commitError of this
// file's own SQL writers, or InTx's "outbox: commit" (shared/outbox rolls
// back before any other error, so only its commit is in doubt).
func isCommitError(err error) bool {
	var ce *commitError
	return errors.As(err, &ce) || strings.Contains(err.Error(), "outbox: commit")
}

type commitError struct{ err error }

func (e *commitError) Error() string { return "commit: " + e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

// sqlWriter publishes with plain SQL publish(), as an application in
// another language would: commits, rollbacks without a report, and
// rollbacks reported with the xid it captured inside the transaction.
func (w *workload) sqlWriter(ctx context.Context, id int) {
	rng := rand.New(rand.NewPCG(uint64(id), 2))
	n := 0
	for ctx.Err() == nil {
		_, texts := payloadsFor(id, &n, 1)
		w.sqlOnce(ctx, rng.IntN(100), texts[0])
		_ = pass.Sleep(ctx, time.Duration(5+rng.IntN(20))*time.Millisecond)
	}
}

func (w *workload) sqlOnce(ctx context.Context, p int, text string) {
	ctx = context.WithoutCancel(ctx)
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		w.l.fail("sql begin", err)
		return
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	var seq int64
	var xid uint64
	if err := tx.QueryRow(ctx, `SELECT outbox.publish('chaos.sql', $1::jsonb), pg_current_xact_id()`, text).Scan(&seq, &xid); err != nil {
		w.l.fail("sql publish", err)
		return // nothing allocated that we know of
	}
	switch {
	case p < 70:
		if err := tx.Commit(ctx); err != nil {
			w.settle([]int64{seq}, []string{text}, xid, &commitError{err}, "sql")
			return
		}
		w.l.commit([]int64{seq}, []string{text}, xid)
	case p < 85:
		_ = tx.Rollback(ctx)
		w.l.abandon([]int64{seq}, time.Now(), false, "sql unreported")
	default:
		_ = tx.Rollback(ctx)
		at := time.Now()
		if err := w.reporter.Report(ctx, report.Report{XID: xid, HasXID: true, Sequences: []int64{seq}}); err != nil {
			w.l.fail("sql report", err)
		}
		w.l.abandon([]int64{seq}, at, true, "sql reported")
	}
}

// killedWriter publishes in a transaction of its own connection, and the
// administrator terminates that connection before it commits: a writer
// that crashed mid-transaction, with no report.
func (w *workload) killedWriter(ctx context.Context, admin *pgxpool.Pool) {
	rng := rand.New(rand.NewPCG(7, 3))
	n := 0
	for ctx.Err() == nil {
		_ = pass.Sleep(ctx, time.Duration(300+rng.IntN(400))*time.Millisecond)
		conn, err := pgx.Connect(ctx, w.url)
		if err != nil {
			w.l.fail("killed writer connect", err)
			continue
		}
		docs, _ := payloadsFor(900, &n, 1+rng.IntN(3))
		tx, err := conn.Begin(ctx)
		if err != nil {
			conn.Close(context.Background())
			continue
		}
		seqs, err := w.ob.Publish(ctx, tx, "chaos.killed", docs...)
		if err != nil {
			w.l.fail("killed writer publish", err)
			conn.Close(context.Background())
			continue
		}
		pid := conn.PgConn().PID()
		if _, err := admin.Exec(context.WithoutCancel(ctx), `SELECT pg_terminate_backend($1)`, pid); err != nil {
			w.l.fail("kill writer", err)
		}
		w.l.abandon(seqs, time.Now(), false, "killed")
		conn.Close(context.Background())
	}
}

// holder keeps a transaction open across several fill passes, and ends it
// by committing or, without a report, rolling back: the fill's proof waits
// for it, and the hostile reports name its rows.
func (w *workload) holder(ctx context.Context) {
	rng := rand.New(rand.NewPCG(8, 4))
	n := 0
	for ctx.Err() == nil {
		_ = pass.Sleep(ctx, time.Duration(1000+rng.IntN(3000))*time.Millisecond)
		bg := context.WithoutCancel(ctx)
		tx, err := w.pool.Begin(bg)
		if err != nil {
			w.l.fail("holder begin", err)
			continue
		}
		begin := time.Now()
		docs, texts := payloadsFor(800, &n, 1+rng.IntN(2))
		seqs, xid, err := w.publishXID(bg, tx, docs)
		if err != nil {
			w.l.fail("holder publish", err)
			_ = tx.Rollback(bg)
			continue
		}
		w.liveMu.Lock()
		w.liveSeq, w.liveXID = seqs, xid
		w.liveMu.Unlock()
		_ = pass.Sleep(ctx, time.Duration(6000+rng.IntN(6000))*time.Millisecond)
		w.liveMu.Lock()
		w.liveSeq = nil
		w.liveMu.Unlock()
		if rng.IntN(2) == 0 {
			err = tx.Commit(bg)
			w.settle(seqs, texts, xid, wrapCommit(err), "holder")
		} else {
			_ = tx.Rollback(bg)
			w.l.abandon(seqs, time.Now(), false, "held")
		}
		w.l.block(begin, time.Now())
	}
}

func wrapCommit(err error) error {
	if err == nil {
		return nil
	}
	return &commitError{err}
}

func (w *workload) publishXID(ctx context.Context, tx pgx.Tx, docs []any) ([]int64, uint64, error) {
	seqs, err := w.ob.Publish(ctx, tx, "chaos.held", docs...)
	if err != nil {
		return nil, 0, err
	}
	var xid uint64
	err = tx.QueryRow(ctx, `SELECT pg_current_xact_id()`).Scan(&xid)
	return seqs, xid, err
}

// live is the holder's open transaction now, if any.
func (w *workload) live() ([]int64, uint64, bool) {
	w.liveMu.Lock()
	defer w.liveMu.Unlock()
	return w.liveSeq, w.liveXID, len(w.liveSeq) > 0
}

// relay drives deliveries as an application's relay: claim, mark
// delivered, push, ack — losing lossPct of the acks.
func (w *workload) relay(ctx context.Context) {
	rng := rand.New(rand.NewPCG(9, 5))
	for ctx.Err() == nil {
		n, err := w.relayOnce(ctx, rng)
		if err != nil && ctx.Err() == nil {
			w.l.fail("relay", err)
		}
		if n == 0 {
			_ = pass.Sleep(ctx, 100*time.Millisecond)
		}
	}
}

func (w *workload) relayOnce(ctx context.Context, rng *rand.Rand) (int, error) {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	claimed, err := w.ob.ClaimPending(ctx, tx, 50)
	if err != nil {
		return 0, err
	}
	for _, d := range claimed {
		if err := w.ob.MarkDelivered(ctx, tx, d.ID); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	for _, d := range claimed {
		if rng.IntN(100) < int(w.lossPct.Load()) {
			w.lostAcks.Add(1)
			continue
		}
		if err := w.ob.Ack(ctx, nil, d.ID); err != nil {
			if errors.Is(err, outbox.ErrLostRace) {
				w.lostAcks.Add(1) // the sweep reset it first
				continue
			}
			return len(claimed), err
		}
	}
	return len(claimed), nil
}

// consumer reads the ordered stream and checks it: every step is the next
// sequence, and it records what it saw.
type consumer struct {
	ob   *outbox.Outbox
	mu   sync.Mutex
	pos  int64
	seen map[int64]string // real events: payload
	// placeholders seen, and steps that were not +1
	placeholders, outOfOrder int
	stallSince               time.Time
	worstStall               time.Duration
}

func (c *consumer) run(ctx context.Context, l *ledger) {
	for ctx.Err() == nil {
		evs, err := c.ob.ReadContiguous(ctx, c.position(), 500)
		if err != nil {
			if ctx.Err() == nil {
				l.fail("consumer", err)
				_ = pass.Sleep(ctx, 100*time.Millisecond)
			}
			continue
		}
		c.take(evs)
		if len(evs) == 0 {
			_ = pass.Sleep(ctx, 20*time.Millisecond)
		}
	}
}

func (c *consumer) position() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pos
}

func (c *consumer) take(evs []outbox.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if len(evs) == 0 {
		if c.stallSince.IsZero() {
			c.stallSince = now
		}
		return
	}
	if !c.stallSince.IsZero() {
		c.worstStall = max(c.worstStall, now.Sub(c.stallSince))
		c.stallSince = time.Time{}
	}
	for _, e := range evs {
		if e.Sequence != c.pos+1 {
			c.outOfOrder++
		}
		c.pos = e.Sequence
		if e.Placeholder() {
			c.placeholders++
			continue
		}
		c.seen[e.Sequence] = string(e.Payload)
	}
}
