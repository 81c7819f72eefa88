package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Faults, by kind.
const (
	killFunctions   = "functions' connections killed"
	lockFillState   = "fill_state locked"
	lockDeliveries  = "deliveries locked"
	shortDeadline   = "a deadline mid-pass"
	restartDatabase = "database restarted"
)

// lockFor is how long a fault holds a lock.
const lockFor = 3 * time.Second

type faults struct {
	// pending are the goroutines that record a fault's consequence after
	// it ran; the judge waits for them.
	pending  sync.WaitGroup
	s        *stack
	l        *ledger
	admin    *pgxpool.Pool
	database string
	root     string
	rng      *rand.Rand
}

// run injects a fault every few seconds until ctx ends, and the restart
// once, at restartAt.
func (f *faults) run(ctx context.Context, restartAt time.Duration) {
	restart := time.After(restartAt)
	kinds := []string{killFunctions, lockFillState, lockDeliveries, shortDeadline}
	for {
		select {
		case <-ctx.Done():
			return
		case <-restart:
			f.restart(ctx)
			continue
		case <-time.After(time.Duration(2500+f.rng.IntN(2500)) * time.Millisecond):
		}
		kind := kinds[f.rng.IntN(len(kinds))]
		if err := f.inject(ctx, kind); err != nil && ctx.Err() == nil {
			f.l.fail("fault "+kind, err)
			continue
		}
		f.l.fault(kind)
	}
}

func (f *faults) inject(ctx context.Context, kind string) error {
	bg := context.WithoutCancel(ctx)
	switch kind {
	case killFunctions:
		_, err := f.admin.Exec(bg, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = $1 AND application_name LIKE 'outboxkeeper-%'`, f.database)
		return err
	case lockFillState, lockDeliveries:
		tx, err := f.admin.Begin(bg)
		if err != nil {
			return err
		}
		defer tx.Rollback(bg) //nolint:errcheck
		begin := time.Now()
		lock := `LOCK TABLE outbox.deliveries IN ACCESS EXCLUSIVE MODE`
		if kind == lockFillState {
			lock = `SELECT 1 FROM outbox.fill_state FOR UPDATE`
		}
		if _, err := tx.Exec(bg, lock); err != nil {
			return err
		}
		_ = pass.Sleep(ctx, lockFor)
		// Both hold the proof back: a row lock takes an xid, and so does
		// an ACCESS EXCLUSIVE lock (it is WAL-logged for standbys); on
		// deliveries, every writer that enqueues waits behind it inside
		// its own transaction, older than any marker taken meanwhile.
		f.l.block(begin, time.Now())
		return nil
	case shortDeadline:
		// The invocation is handed the lease and ends on its own deadline
		// with no successor; until the schedule's next one, nobody
		// watches: a blind moment the bound allows for (the next pass
		// first sees what was given up meanwhile, so its grace starts
		// then).
		begin := time.Now()
		f.pending.Go(func() {
			f.s.invoke(ctx, f.s.fillShort, f.s.tmpl.FillInput)
			f.l.blind(begin, f.s.nextFillAfter(time.Now()))
		})
		return nil
	}
	return fmt.Errorf("no fault %q", kind)
}

// restart is `pg_ctl restart -m fast`: every connection cut, the server
// gone for a moment.
func (f *faults) restart(ctx context.Context) {
	begin := time.Now()
	out, err := exec.CommandContext(context.WithoutCancel(ctx), "bash", filepath.Join(f.root, "infra", "stack", "pg-restart.sh")).CombinedOutput()
	if err != nil {
		f.l.fail("restart", fmt.Errorf("%v: %s", err, out))
		return
	}
	// The outage ends when the functions can log in again by both of
	// their paths, not when pg_ctl returns: after a failed server login
	// PgBouncer refuses new logins for server_login_retry (15 s by
	// default), and the fill through it is as blocked as if the server
	// were still down.
	back := f.reachable(ctx, f.s.directURL, f.s.pooled)
	f.l.block(begin, back.Add(time.Second))
	f.l.fault(restartDatabase)
}

// reachable waits until a query succeeds on a fresh connection to every
// url, and returns when the last one did (at most a minute on).
func (f *faults) reachable(ctx context.Context, urls ...string) time.Time {
	deadline := time.Now().Add(time.Minute)
	for _, url := range urls {
		for time.Now().Before(deadline) && ctx.Err() == nil {
			try, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			conn, err := pgx.Connect(try, url)
			if err == nil {
				_, err = conn.Exec(try, `SELECT 1`)
				conn.Close(try)
			}
			cancel()
			if err == nil {
				break
			}
			_ = pass.Sleep(ctx, 200*time.Millisecond)
		}
	}
	return time.Now()
}
