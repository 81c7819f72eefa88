package chaos

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
)

// allowance is added to the fill's bound: the statements between seeing a
// gap and writing it, a retry after a killed connection (a tick), and the
// moments the machine is busy with everything a chaos run does at once.
const allowance = 2 * time.Second

// Check is one verdict line.
type Check struct {
	Name, Detail string
	OK           bool
}

// Report is what a run found.
type Report struct {
	Checks  []Check
	Figures []string
}

// OK says every check passed.
func (r *Report) OK() bool {
	return !slices.ContainsFunc(r.Checks, func(c Check) bool { return !c.OK })
}

// Print writes the figures and the verdict.
func (r *Report) Print(w io.Writer) {
	for _, f := range r.Figures {
		fmt.Fprintln(w, " ", f)
	}
	fmt.Fprintln(w)
	for _, c := range r.Checks {
		mark := "PASS"
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s  %-50s %s\n", mark, c.Name, c.Detail)
	}
}

// row is one events row as the judge reads it.
type row struct {
	Sequence   int64
	Payload    *string
	FilledBy   *string
	RecordedAt time.Time
}

// judge reads the database and the queues after quiescence and holds them
// to the run's ledger.
func judge(ctx context.Context, pool *pgxpool.Pool, s *stack, w *workload, c *consumer, cfg fill.Config, stuckAfter time.Duration, runStart time.Time) (*Report, error) {
	l := w.l
	rows, err := pool.Query(ctx, `SELECT sequence, payload::text, filled_by, recorded_at FROM outbox.events ORDER BY sequence`)
	if err != nil {
		return nil, err
	}
	events, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, err
	}
	var head int64
	if err := pool.QueryRow(ctx, `SELECT outbox.allocation_head()`).Scan(&head); err != nil {
		return nil, err
	}
	byseq := make(map[int64]row, len(events))
	for _, e := range events {
		byseq[e.Sequence] = e
	}
	r := &Report{}
	add := func(name string, ok bool, format string, args ...any) {
		r.Checks = append(r.Checks, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	l.mu.Lock()
	defer l.mu.Unlock()

	// Every committed event present once (the primary key), with its payload.
	lost, changed := 0, 0
	for seq, payload := range l.committed {
		e, ok := byseq[seq]
		switch {
		case !ok || e.FilledBy != nil:
			lost++
		case e.Payload == nil || *e.Payload != payload:
			changed++
		}
	}
	add("every committed event present with its payload", lost == 0 && changed == 0,
		"%d committed: %d lost, %d changed", len(l.committed), lost, changed)

	// Nothing missing up to the head.
	missing := 0
	for seq := int64(1); seq <= head; seq++ {
		if _, ok := byseq[seq]; !ok {
			missing++
		}
	}
	add("every sequence up to the head present", missing == 0, "head %d, %d missing", head, missing)

	// No placeholder where a writer committed (an in-doubt commit may be either).
	overwritten := 0
	for seq := range l.committed {
		if e, ok := byseq[seq]; ok && e.FilledBy != nil {
			overwritten++
		}
	}
	resolved := 0
	for seq, payload := range l.inDoubt {
		if e, ok := byseq[seq]; ok && (e.FilledBy != nil || e.Payload != nil && *e.Payload == payload) {
			resolved++
		}
	}
	add("no placeholder at a committed writer's sequence", overwritten == 0,
		"%d overwritten; %d commits in doubt, %d of them resolved either way", overwritten, len(l.inDoubt), resolved)

	// The consumer's view.
	c.mu.Lock()
	seenOK := len(c.seen) >= len(l.committed)
	for seq := range l.committed {
		if c.seen[seq] != l.committed[seq] {
			seenOK = false
		}
	}
	add("the consumer saw a strictly increasing, gap-free stream", c.outOfOrder == 0 && c.pos == head && seenOK,
		"at %d of head %d, %d steps not +1, %d placeholders passed, every committed event seen: %v",
		c.pos, head, c.outOfOrder, c.placeholders, seenOK)
	worstStall := c.worstStall
	c.mu.Unlock()

	// Deliveries.
	var stuck, open int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'delivered' AND delivered_at < now() - $1::bigint * interval '1 millisecond'),
		count(*) FILTER (WHERE state IN ('pending', 'delivered')) FROM outbox.deliveries`, stuckAfter.Milliseconds()).Scan(&stuck, &open); err != nil {
		return nil, err
	}
	add("no delivery left delivered past the threshold", stuck == 0, "%d stuck, %d open, %d acks lost", stuck, open, w.lostAcks.Load())

	// Hostile reports.
	dlq, err := drainDLQ(ctx, s.sqs, s.queues.DLQURL, func(id string) string {
		return l.hostileByID[id] // the judge holds l.mu
	})
	if err != nil {
		return nil, err
	}
	var notInDLQ []string
	for id, kind := range l.hostileByID {
		if slices.Contains(toDLQ, kind) && !dlq.ids[id] {
			notInDLQ = append(notInDLQ, kind+" "+id)
		}
	}
	sort.Strings(notInDLQ)
	var refusedWrong []string
	for _, k := range toDLQ {
		if dlq.byKind[k] != l.hostile[k] {
			refusedWrong = append(refusedWrong, fmt.Sprintf("%s: %d sent, %d dead-lettered", k, l.hostile[k], dlq.byKind[k]))
		}
	}
	for k, n := range dlq.byKind {
		if !slices.Contains(toDLQ, k) {
			refusedWrong = append(refusedWrong, fmt.Sprintf("%s: %d dead-lettered, want none", k, n))
		}
	}
	sort.Strings(refusedWrong)
	absent := ""
	if len(notInDLQ) > 0 {
		absent = fmt.Sprintf("; %d not in the DLQ, by source message id: %s", len(notInDLQ), strings.Join(notInDLQ[:min(8, len(notInDLQ))], ", "))
	}
	add("every hostile report rejected or harmless",
		len(refusedWrong) == 0 && dlq.withReason == dlq.total && overwritten == 0 && lost == 0,
		"%d dead-lettered (%d with a reason); %s%s", dlq.total, dlq.withReason,
		orNone(strings.Join(refusedWrong, "; "), "each refused kind exactly, the rest harmless"), absent)

	// Every abandoned sequence filled within the bound.
	late, filled := 0, 0
	var worst time.Duration
	worstCase := ""
	for seq, a := range l.abandoned {
		e, ok := byseq[seq]
		if !ok || e.FilledBy == nil {
			continue // counted as missing or as overwritten above
		}
		filled++
		bound := local.FillBound(a.at, cfg.Grace, cfg.Tick, l.blockers).Add(allowance)
		if past := e.RecordedAt.Sub(bound); past > 0 {
			late++
			if past > worst {
				// Enough to tell a slow statement from a missed wake-up.
				worst = past
				worstCase = fmt.Sprintf("; worst: sequence %d (%s, reported %v) abandoned at +%.3fs, due +%.3fs, filled by %s at +%.3fs",
					seq, a.how, a.reported, a.at.Sub(runStart).Seconds(), bound.Sub(runStart).Seconds(),
					*e.FilledBy, e.RecordedAt.Sub(runStart).Seconds()) +
					"; faults in the 5s before until then: " + l.faultsBetween(a.at.Add(-5*time.Second), e.RecordedAt, runStart)
			}
		}
	}
	add("every abandoned sequence filled within the bound", late == 0 && filled == len(l.abandoned),
		"%d of %d filled; %d late (worst %.3fs past grace %s + tick %s, or a tick after a blocker, + %s)%s",
		filled, len(l.abandoned), late, worst.Seconds(), cfg.Grace, cfg.Tick, allowance, worstCase)

	add("no invocation killed by its timeout", s.killed.Load() == 0,
		"%d invocations, %d failed (the restart), %d killed", s.invocations.Load(), s.failed.Load(), s.killed.Load())

	placeholders := 0
	for _, e := range events {
		if e.FilledBy != nil {
			placeholders++
		}
	}
	r.Figures = []string{
		fmt.Sprintf("events %d (head %d): %d committed, %d placeholders", len(events), head, len(l.committed), placeholders),
		fmt.Sprintf("transactions: %d commits, %d rollbacks (%d reported, %d connections killed mid-transaction), %d commits in doubt",
			l.commits, l.rollbacks, l.reportedRollbacks, l.killed, len(l.inDoubt)),
		fmt.Sprintf("faults: %s", countsOf(l.faults)),
		fmt.Sprintf("hostile reports: %s; dead-lettered %s", countsOf(l.hostile), countsOf(dlq.byKind)),
		fmt.Sprintf("lost %d, overwritten %d, worst consumer stall %.1fs", lost, overwritten, worstStall.Seconds()),
		fmt.Sprintf("invocations by function: %v; workload errors (expected under faults): %s", s.byFunction, countsOf(l.errs)),
	}
	if len(s.failures) > 0 {
		r.Figures = append(r.Figures, fmt.Sprintf("first invocation failures: %q", s.failures))
	}
	return r, nil
}

// countsOf prints a kind-to-count map, sorted by kind (the caller holds
// the ledger's lock).
func countsOf(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := ""
	for i, k := range keys {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s %d", k, m[k])
	}
	if out == "" {
		return "none"
	}
	return out
}

// dlqContents is what the DLQ held at the end: messages by the kind of
// hostile report they were sent as ("an honest report" when none, "no
// source id" for one the queue's redrive policy moved), the source message
// ids seen, and how many carry an `error` attribute.
type dlqContents struct {
	total, withReason int
	byKind            map[string]int
	ids               map[string]bool
}

// drainDLQ receives everything in the DLQ and classifies each message by
// its source_message_id with kindOf.
func drainDLQ(ctx context.Context, c *sqs.Client, url string, kindOf func(sourceID string) string) (dlqContents, error) {
	d := dlqContents{byKind: map[string]int{}, ids: map[string]bool{}}
	for {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames: []string{"All"}, VisibilityTimeout: 300,
		})
		if err != nil {
			return d, err
		}
		if len(out.Messages) == 0 {
			return d, nil
		}
		for _, m := range out.Messages {
			d.total++
			if a, ok := m.MessageAttributes["error"]; ok && aws.ToString(a.StringValue) != "" {
				d.withReason++
			}
			source := aws.ToString(m.MessageAttributes["source_message_id"].StringValue)
			kind := "no source id"
			if source != "" {
				d.ids[source] = true
				if kind = kindOf(source); kind == "" {
					kind = "an honest report"
				}
			}
			d.byKind[kind]++
		}
	}
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}
