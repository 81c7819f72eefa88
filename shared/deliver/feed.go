package deliver

import (
	"context"
	"slices"
	"sync"
	"time"
)

// feed is a pass's pipeline of pushes: each claim's deliveries go in as
// calls (pusher.calls), DELIVER_CONCURRENCY workers take calls one at a
// time for as long as there are any, and a batch's settle goes out as soon
// as the last call of that batch returns. So no worker waits for the
// slowest call of a batch, and the next claim overlaps the pushes of the
// last.
type feed struct {
	pusher *pusher
	// pctx bounds every push: the budget's end less settleReserve.
	pctx   context.Context
	cancel context.CancelFunc
	settle func(acked, gone []int64) settled
	now    func() time.Time

	mu   sync.Mutex
	cond *sync.Cond
	// queue is the calls not yet taken, in the order they came.
	queue []*call
	// inflight counts calls taken and not yet returned; busy are the FIFO
	// groups they carry.
	inflight int
	busy     map[string]bool
	closed   bool
	tally    tally
	// last is how long the last batch took, its claim to its last call;
	// calls is how many calls the last claim came to.
	last  time.Duration
	calls int
	// wake is signalled whenever a call is taken or returns, or a settle
	// is counted.
	wake chan struct{}

	workers sync.WaitGroup
	// settleMu keeps the settles one at a time, each its own statement.
	settleMu sync.Mutex
	settles  sync.WaitGroup
}

// tally is what the feed's pushes and settles came to since it was last
// read.
type tally struct {
	acked, gone, lost, failed int64
	lastError                 string
	err                       error
}

// batch is one claim's live deliveries on their way through the feed.
type batch struct {
	start time.Time
	left  int
	outs  []outcome
}

// newFeed starts concurrency workers pushing within ctx until the budget's
// end less settleReserve; settle sends one batch's settle statement.
func newFeed(ctx context.Context, p *pusher, end time.Time, concurrency int, now func() time.Time,
	settle func(acked, gone []int64) settled) *feed {
	pctx, cancel := context.WithDeadline(ctx, end.Add(-settleReserve))
	f := &feed{
		pusher: p, pctx: pctx, cancel: cancel, settle: settle, now: now,
		busy: map[string]bool{}, wake: make(chan struct{}, 1),
	}
	f.cond = sync.NewCond(&f.mu)
	for range concurrency {
		f.workers.Add(1)
		go func() {
			defer f.workers.Done()
			for c := f.take(); c != nil; c = f.take() {
				f.done(c, f.pusher.pushCall(f.pctx, c))
			}
		}()
	}
	return f
}

// add feeds one claim's live deliveries in, claimed at start.
func (f *feed) add(start time.Time, ds []delivery) {
	if len(ds) == 0 {
		return
	}
	calls := f.pusher.calls(ds)
	b := &batch{start: start, left: len(calls)}
	f.mu.Lock()
	f.calls = len(calls)
	for _, c := range calls {
		c.b = b
		f.queue = append(f.queue, c)
	}
	f.mu.Unlock()
	f.cond.Broadcast()
}

// take is a worker's next call, nil once the feed is closed and empty. A
// call carrying a FIFO group in flight, or one an earlier call still
// waiting carries, is passed over: a group's calls go one at a time, in
// the order they came.
func (f *feed) take() *call {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		if i := f.next(); i >= 0 {
			c := f.queue[i]
			f.queue = slices.Delete(f.queue, i, i+1)
			for _, g := range c.groups {
				f.busy[g] = true
			}
			f.inflight++
			f.signal()
			return c
		}
		if f.closed && len(f.queue) == 0 {
			return nil
		}
		f.cond.Wait()
	}
}

// next is the index of the first call that may go now, or -1.
func (f *feed) next() int {
	var passed map[string]bool
	for i, c := range f.queue {
		free := true
		for _, g := range c.groups {
			if f.busy[g] || passed[g] {
				free = false
				break
			}
		}
		if free {
			return i
		}
		if passed == nil {
			passed = map[string]bool{}
		}
		for _, g := range c.groups {
			passed[g] = true
		}
	}
	return -1
}

// done records a call's outcomes; the last of its batch sends the batch's
// settle.
func (f *feed) done(c *call, outs []outcome) {
	f.mu.Lock()
	for _, g := range c.groups {
		delete(f.busy, g)
	}
	f.inflight--
	for _, o := range outs {
		if o.result == pushFailed {
			f.tally.failed++
			f.tally.lastError = o.reason
		}
	}
	b := c.b
	b.outs = append(b.outs, outs...)
	b.left--
	last := b.left == 0
	if last {
		f.last = f.now().Sub(b.start)
		f.settles.Add(1)
	}
	f.signal()
	f.mu.Unlock()
	f.cond.Broadcast()
	if last {
		go f.settleBatch(b.outs)
	}
}

// settleBatch acks what a batch's targets accepted, in one statement.
func (f *feed) settleBatch(outs []outcome) {
	defer f.settles.Done()
	acked, gone := split(outs)
	if len(acked)+len(gone) == 0 {
		return
	}
	f.settleMu.Lock()
	r := f.settle(acked, gone)
	f.settleMu.Unlock()
	f.mu.Lock()
	f.tally.acked += r.acked
	f.tally.gone += r.gone
	f.tally.lost += r.lost
	if f.tally.err == nil {
		f.tally.err = r.err
	}
	f.mu.Unlock()
	f.signal()
}

func (f *feed) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// load is what the feed has in hand.
type load struct {
	// queued calls wait untaken, inflight are taken; calls is how many
	// the last claim came to, last how long the last batch took.
	queued, inflight, calls int
	last                    time.Duration
}

func (f *feed) load() load {
	f.mu.Lock()
	defer f.mu.Unlock()
	return load{queued: len(f.queue), inflight: f.inflight, calls: f.calls, last: f.last}
}

// err is the first settle's error, if any.
func (f *feed) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tally.err
}

// wait waits until a call is taken or returns, d passes, or ctx ends.
func (f *feed) wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-f.wake:
	case <-t.C:
	case <-ctx.Done():
	}
}

// drain waits until every call fed in has returned and every settle is
// sent, the pushes still bounded by the budget.
func (f *feed) drain() {
	f.mu.Lock()
	for len(f.queue)+f.inflight > 0 {
		f.cond.Wait()
	}
	f.mu.Unlock()
	f.settles.Wait()
}

// read hands over what the feed came to since the last read.
func (f *feed) read() tally {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tally
	f.tally = tally{err: t.err}
	return t
}

// close drains the feed and stops its workers.
func (f *feed) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cond.Broadcast()
	f.workers.Wait()
	f.settles.Wait()
	f.cancel()
}
