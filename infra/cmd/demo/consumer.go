package main

import (
	"context"
	"sync"
	"time"

	"github.com/outboxkeeper/outboxkeeper/shared/pass"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
)

// consumer reads the ordered stream as an application would: ReadContiguous
// from its cursor, never past a missing sequence. It checks that every step
// is exactly +1 and counts each real event it sees, so the verdict can say
// every committed event was consumed exactly once and in order.
type consumer struct {
	ob *outbox.Outbox
	l  *ledger

	mu   sync.Mutex
	pos  int64
	head int64
	seen map[int64]int // real events consumed, by sequence
	// passed is when the consumer took each placeholder: the moment it
	// got past an abandoned sequence.
	passed map[int64]time.Time
	// read is when the consumer's read first returned each real event:
	// when the stream made it readable, within a poll.
	read     map[int64]time.Time
	byPath   map[string]int
	outOfOrd int
	// blockedAt is when the cursor last stopped short of the head; zero
	// while it is caught up. The stall age is the time since.
	blockedAt time.Time
	maxStall  time.Duration
}

func newConsumer(ob *outbox.Outbox, l *ledger) *consumer {
	return &consumer{ob: ob, l: l, seen: map[int64]int{}, passed: map[int64]time.Time{}, read: map[int64]time.Time{}, byPath: map[string]int{}}
}

func (c *consumer) run(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := c.once(ctx)
		if err != nil && ctx.Err() == nil {
			c.l.fail("consumer", err)
		}
		if n == 0 {
			_ = pass.Sleep(ctx, 50*time.Millisecond)
		}
	}
}

func (c *consumer) once(ctx context.Context) (int, error) {
	c.mu.Lock()
	pos := c.pos
	c.mu.Unlock()
	evs, err := c.ob.ReadContiguous(ctx, pos, 1000)
	if err != nil {
		return 0, err
	}
	// When the page came back: the consumer is past its placeholders
	// from here on.
	now := time.Now()
	// The head is read after the page: a head read first could already be
	// passed by the page and would hide a stall behind it.
	head, err := c.ob.Head(ctx)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ev := range evs {
		if ev.Sequence != c.pos+1 {
			c.outOfOrd++
		}
		c.pos = ev.Sequence
		if ev.Placeholder() {
			c.byPath[ev.FilledBy]++
			c.passed[ev.Sequence] = now
		} else {
			if c.seen[ev.Sequence] == 0 {
				c.read[ev.Sequence] = now
			}
			c.seen[ev.Sequence]++
		}
	}
	c.head = head
	switch {
	case c.pos >= head:
		c.blockedAt = time.Time{}
	case len(evs) > 0 || c.blockedAt.IsZero():
		c.blockedAt = now // stopped short of the head at a new place
	}
	c.maxStall = max(c.maxStall, c.stallLocked(now))
	return len(evs), nil
}

func (c *consumer) stallLocked(now time.Time) time.Duration {
	if c.blockedAt.IsZero() {
		return 0
	}
	return now.Sub(c.blockedAt)
}

// consumerView is a copy of the consumer's state for status and verdict.
type consumerView struct {
	Pos, Head  int64
	Stall      time.Duration
	MaxStall   time.Duration
	OutOfOrder int
	ByPath     map[string]int
	Seen       map[int64]int
	Passed     map[int64]time.Time
	Read       map[int64]time.Time
}

func (c *consumer) view(full bool) consumerView {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := consumerView{
		Pos: c.pos, Head: c.head, Stall: c.stallLocked(time.Now()), MaxStall: c.maxStall,
		OutOfOrder: c.outOfOrd,
		ByPath:     map[string]int{store.FilledByFill: c.byPath[store.FilledByFill], store.FilledByCompensate: c.byPath[store.FilledByCompensate]},
	}
	if full {
		v.Seen, v.Passed, v.Read = c.seen, c.passed, c.read // the consumer has stopped when full is asked for
	}
	return v
}
