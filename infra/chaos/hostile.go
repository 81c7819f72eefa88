package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// Hostile reports, by kind, and what compensate must make of each: bad
// input goes to the DLQ with its reason; a report that could pass the
// check but names rows it should not is harmless (ON CONFLICT DO NOTHING,
// and a live writer's row makes it wait, then defer).
const (
	aboveHead  = "above the head"             // DLQ
	futureXID  = "a future xid"               // DLQ
	otherEpoch = "an xid one epoch above"     // DLQ: a live writer's xid + 2^32
	hugeBody   = "a 1 MiB body"               // DLQ: far more sequences than allowed
	malformed  = "malformed JSON"             // DLQ
	committed  = "a committed sequence"       // harmless: with its writer's own xid
	liveRow    = "a live writer's sequence"   // harmless: a finished xid naming a held row
	duplicated = "a duplicated honest report" // harmless: filled once
)

// toDLQ are the kinds whose every message must reach the DLQ with a reason.
var toDLQ = []string{aboveHead, futureXID, otherEpoch, hugeBody, malformed}

// hostileBodySize: a 1 MiB body less what the DLQ's `error` attribute
// needs, so the message can be forwarded unchanged with its reason.
const hostileBodySize = 1<<20 - 4<<10

type hostile struct {
	w     *workload
	sqs   *sqs.Client
	queue string
	admin *pgxpool.Pool
	rng   *rand.Rand
	// honest remembers the writers' own reports, to send one again.
	honest *remembering
}

// remembering is a RollbackReporter that remembers the reports it passes
// on, so the same honest report can be delivered twice.
type remembering struct {
	inner outbox.RollbackReporter
	mu    sync.Mutex
	sent  []report.Report
}

func (r *remembering) Report(ctx context.Context, rep report.Report) error {
	r.mu.Lock()
	if len(r.sent) < 1000 {
		r.sent = append(r.sent, rep)
	}
	r.mu.Unlock()
	return r.inner.Report(ctx, rep)
}

func (r *remembering) sample(rng *rand.Rand) (report.Report, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sent) == 0 {
		return report.Report{}, false
	}
	return r.sent[rng.IntN(len(r.sent))], true
}

func (h *hostile) run(ctx context.Context) {
	kinds := []string{aboveHead, futureXID, otherEpoch, hugeBody, malformed, committed, liveRow, duplicated}
	for ctx.Err() == nil {
		_ = pass.Sleep(ctx, time.Duration(800+h.rng.IntN(800))*time.Millisecond)
		kind := kinds[h.rng.IntN(len(kinds))]
		body, ok := h.body(ctx, kind)
		if !ok {
			continue
		}
		out, err := h.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(h.queue), MessageBody: aws.String(body)})
		if err != nil {
			if ctx.Err() == nil {
				h.w.l.fail("hostile send", err)
			}
			continue
		}
		h.w.l.sentHostile(kind, aws.ToString(out.MessageId))
	}
}

// body builds a report of kind, or says it cannot right now (no live
// writer, no committed sequence with a known xid yet).
func (h *hostile) body(ctx context.Context, kind string) (string, bool) {
	var head, xmax int64
	if err := h.admin.QueryRow(ctx, `SELECT outbox.allocation_head(), pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&head, &xmax); err != nil {
		return "", false
	}
	switch kind {
	case aboveHead:
		// Far above: the writers allocate over a thousand a second, and a
		// sequence they reach before compensate reads the report is no
		// longer above the head.
		return fmt.Sprintf(`{"v":1,"sequences":[%d]}`, head+1_000_000_000), true
	case futureXID:
		return fmt.Sprintf(`{"v":1,"xid":"%d","sequences":[%d]}`, xmax+10_000_000, max(head, 1)), true
	case otherEpoch:
		_, xid, ok := h.w.live()
		if !ok {
			return "", false
		}
		return fmt.Sprintf(`{"v":1,"xid":"%d","sequences":[%d]}`, xid+1<<32, max(head, 1)), true
	case hugeBody:
		// Distinct sequences, ~150k of them: the cap counts distinct ones,
		// so a body repeating one sequence would be a harmless report.
		var b strings.Builder
		b.WriteString(`{"v":1,"sequences":[1`)
		for n := 2; b.Len() < hostileBodySize-16; n++ {
			fmt.Fprintf(&b, ",%d", n)
		}
		b.WriteString(`]}`)
		return b.String(), true
	case malformed:
		return `{"v":1,"sequences":[1,2`, true
	case committed:
		seq, xid, ok := h.w.l.committedSample()
		if !ok {
			return "", false
		}
		return fmt.Sprintf(`{"v":1,"xid":"%d","sequences":[%d]}`, xid, seq), true
	case liveRow:
		seqs, _, ok := h.w.live()
		if !ok {
			return "", false
		}
		// A finished xid: the oldest one a snapshot no longer waits on
		// is not needed; any aborted one will do, and a report without a
		// status would not reach the insert. The xmin of the snapshot
		// minus one has ended by definition.
		var ended int64
		if err := h.admin.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint - 1`).Scan(&ended); err != nil {
			return "", false
		}
		return fmt.Sprintf(`{"v":1,"xid":"%d","sequences":[%d]}`, ended, seqs[0]), true
	case duplicated:
		rep, ok := h.honest.sample(h.rng)
		if !ok {
			return "", false
		}
		bodies, err := report.Encode(rep, 0)
		if err != nil {
			return "", false
		}
		return string(bodies[0]), true
	}
	return "", false
}
