package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/queuedepth"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	"github.com/outboxkeeper/outboxkeeper/shared/migrations"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

type outboxStatusFlags struct {
	dbFlags
	queueFlags
	thresholds
}

// thresholds are the rule by which status says a person is needed.
type thresholds struct {
	silentAfter      time.Duration
	pruneSilentAfter time.Duration
	stalledAfter     time.Duration
	openAfter        time.Duration
	stuckAfter       time.Duration
	heldAfter        time.Duration
}

var statusCommand = &command{
	name:    "status",
	summary: "the fill's watermark and stall, who blocks it, deliveries, the last passes",
	help: `What a person on call needs first, read from the database the functions use:

  FILL        the watermark (every sequence up to it is present), the allocation
              head, the lag between them; the current stall and its cycle: since
              when, its marker and what the fill waits for (grace, proof)
  BLOCKED BY  when a proof is waiting: the sessions holding the xmin horizon back
              past the cycle's marker (the fill's own blocked_by: pid, database,
              user, state, transaction age, application, the start of the query)
  DELIVERIES  open (pending, delivered), stuck (delivered longer than
              --stuck-after), dead, and the oldest open one's age
  PASSES      the last pass of fill, sweep and prune, from their state tables
  SKIPS       the last stalls skipped by an operator (skip-stall)
  CONSUMERS   each registered consumer and relay: position, lag behind the head,
              last commit, whether it holds retention back (its oldest untaken
              event is older than the prune's retention) and since when; then
              the last rewinds and retires (outboxkeeper consumers)
  QUEUES      the rollback report queue and its DLQ, when their URLs are known

Exit status 3, with the reasons under NEEDS ATTENTION, when any of these holds:
  fill-silent    no fill pass has written its state for --silent-after (5m), or
                 none ever (what the migration wrote is not a pass): its schedule
                 is disabled, its role or trigger broken, or it fails
  sweep-silent   no sweep pass for --silent-after, or none ever
  prune-silent   the last prune pass is older than --prune-silent-after (2h), or
                 none ever since its table was made longer ago than that
  proof-blocked  the current proof has waited longer than --stalled-after (5m)
  stalled        the watermark has stalled longer than --stalled-after
  dead           a delivery is dead
  relay          the oldest open delivery is older than --open-after (15m)
  dlq            the report DLQ holds messages (when its URL is known)
  retention-held a consumer has held retention back longer than --held-after (1h)
0 when none does, 1 on an error, 2 for a bad command line: fit for a health check.
The thresholds' defaults are the template's alarms'.

` + queueHelp,
	flags: func(fs *flag.FlagSet) any {
		f := &outboxStatusFlags{}
		addDBFlags(fs, &f.dbFlags)
		addQueueFlags(fs, &f.queueFlags)
		fs.DurationVar(&f.silentAfter, "silent-after", 5*time.Minute, "fill or sweep silent this long needs a person")
		fs.DurationVar(&f.pruneSilentAfter, "prune-silent-after", 2*time.Hour, "prune silent this long needs a person")
		fs.DurationVar(&f.stalledAfter, "stalled-after", 5*time.Minute, "a stall or a blocked proof this long needs a person")
		fs.DurationVar(&f.openAfter, "open-after", 15*time.Minute, "an open delivery this old needs a person (the relay is down)")
		fs.DurationVar(&f.stuckAfter, "stuck-after", time.Minute, "a delivery delivered this long without an ack is stuck (SWEEP_STUCK_AFTER)")
		fs.DurationVar(&f.heldAfter, "held-after", time.Hour, "a consumer holding retention back this long needs a person (ConsumerHeldAlarmSeconds)")
		return f
	},
	run: runStatus,
}

// statusReport is what status prints, as a table or as JSON.
type statusReport struct {
	Schema     string               `json:"schema"`
	Database   string               `json:"database"`
	At         time.Time            `json:"at"`
	Fill       fillReport           `json:"fill"`
	BlockedBy  []fill.Blocker       `json:"blocked_by"`
	Deliveries store.DeliveryCounts `json:"deliveries"`
	Sweep      sweep.State          `json:"sweep"`
	Prune      prune.State          `json:"prune"`
	// PruneInstalledAt is when the migration that made prune_state was
	// applied: a prune that never ran is silent counted from then.
	PruneInstalledAt *time.Time        `json:"prune_installed_at"`
	Skips            []store.Skip      `json:"skips"`
	Queue            *queuedepth.Depth `json:"queue,omitempty"`
	DLQ              *queuedepth.Depth `json:"dlq,omitempty"`
	// Consumers are the registered consumers and relays, the slowest
	// first; ConsumerChanges the last rewinds and retires.
	Consumers       []store.ConsumerStatus `json:"consumers"`
	ConsumerChanges []store.ConsumerChange `json:"consumer_changes"`
	Attention       []finding              `json:"attention"`
}

// fillReport is the fill's side of the status.
type fillReport struct {
	Started   bool  `json:"started"`
	Watermark int64 `json:"watermark"`
	Head      int64 `json:"head"`
	// Lag is Head - Watermark, before the first pass too: read_events
	// stops at the first missing sequence until a pass proves it.
	Lag       int64  `json:"lag"`
	StalledAt *int64 `json:"stalled_at"`
	// Waiting is what the fill waits for: "" (caught up), "grace",
	// "proof", "fill" (a proven cycle being written), "look" (behind the
	// head with no cycle yet: the next tick looks), "start" (never ran).
	Waiting       string          `json:"waiting"`
	Cycle         *fill.CycleView `json:"cycle"`
	StallAgeS     *float64        `json:"stall_age_s"`
	ProofBlockedS *float64        `json:"proof_blocked_s"`
	PassRunning   bool            `json:"pass_running"`
	// PassEverRan is false while fill_state is as a migration wrote it:
	// no pass has run since, and LastWriteAt, LastWriteAgoS are null.
	PassEverRan    bool       `json:"pass_ever_ran"`
	LastWriteAgoS  *float64   `json:"last_write_ago_s"`
	LastWriteAt    *time.Time `json:"last_write_at"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
}

// finding is one reason a person is needed.
type finding struct {
	Name string `json:"name"`
	What string `json:"what"`
	Next string `json:"next"`
}

func runStatus(ctx context.Context, e *env, opts any) error {
	f := opts.(*outboxStatusFlags)
	return withLogin(ctx, e, f.schema, func(l *login) error {
		r, err := readStatus(ctx, l, f)
		if err != nil {
			return err
		}
		if queue, dlq := f.urls(e); queue != "" || dlq != "" {
			if r.Queue, r.DLQ, err = queueDepths(ctx, queue, dlq); err != nil {
				return err
			}
		}
		r.Attention = assess(r, f.thresholds)

		if f.json {
			err = printJSON(e.stdout, r)
		} else {
			err = printStatusReport(e.stdout, r, f.thresholds)
		}
		if err != nil {
			return err
		}
		if len(r.Attention) > 0 {
			return errAttention
		}
		return nil
	})
}

// readStatus reads the database's side of the status, each part through
// the statements of the package that owns it.
func readStatus(ctx context.Context, l *login, f *outboxStatusFlags) (*statusReport, error) {
	q := l.bounded(&f.dbFlags)
	schema := store.MustSchema(l.schema)
	r := &statusReport{Schema: l.schema, Database: l.target, BlockedBy: []fill.Blocker{}}
	fs, err := fill.ReadStatus(ctx, q, schema)
	if err != nil {
		return nil, explainMissingSchema(ctx, q, l, err)
	}
	// Every fill pass's last statement sets fill_state.updated_at to its
	// transaction's now(); a row no pass has written since carries the
	// migration's.
	byMigration, err := migrations.AppliedIn(ctx, q, schema, fs.UpdatedAt)
	if err != nil {
		return nil, explainMissingSchema(ctx, q, l, err)
	}
	r.At = fs.Now
	r.Fill = describeFill(fs, !byMigration)
	if m := fs.Cycle; m != nil && m.Marker != nil && r.Fill.Waiting == fill.WaitingProof {
		if r.BlockedBy, err = fill.Blockers(ctx, q, *m.Marker); err != nil {
			return nil, err
		}
	}
	if r.Deliveries, err = store.NewDeliveryAdmin(schema).Counts(ctx, q, f.stuckAfter); err != nil {
		return nil, err
	}
	if r.Sweep, err = sweep.ReadState(ctx, q, schema); err != nil {
		return nil, err
	}
	if r.Prune, err = prune.ReadState(ctx, q, schema); err != nil {
		return nil, err
	}
	if r.PruneInstalledAt, err = migrations.AppliedAt(ctx, q, schema, pruneMigration); err != nil {
		return nil, err
	}
	if r.Skips, err = store.NewSkips(schema).Recent(ctx, q, 3); err != nil {
		return nil, err
	}
	ops := store.NewConsumerOps(schema)
	if r.Consumers, err = ops.Status(ctx, q); err != nil {
		return nil, explainConsumerError(err, l.schema)
	}
	if r.ConsumerChanges, err = ops.Recent(ctx, q, 3); err != nil {
		return nil, explainConsumerError(err, l.schema)
	}
	if r.Consumers == nil {
		r.Consumers = []store.ConsumerStatus{}
	}
	if r.ConsumerChanges == nil {
		r.ConsumerChanges = []store.ConsumerChange{}
	}
	return r, nil
}

// queueDepths reads the report queue's and the DLQ's depths, nil for a
// queue whose URL is not known.
func queueDepths(ctx context.Context, queue, dlq string) (q, d *queuedepth.Depth, err error) {
	c, err := newSQS(ctx)
	if err != nil {
		return nil, nil, err
	}
	read := func(url string) (*queuedepth.Depth, error) {
		if url == "" {
			return nil, nil
		}
		qd, err := queuedepth.Of(ctx, c, url)
		return &qd, err
	}
	if q, err = read(queue); err != nil {
		return nil, nil, err
	}
	if d, err = read(dlq); err != nil {
		return nil, nil, err
	}
	return q, d, nil
}

// pruneMigration made prune_state: a prune pass is due from when it was
// applied.
const pruneMigration = "0008_prune_state.sql"

// explainMissingSchema turns a statement that found no outbox table or
// function (an unmigrated or half-migrated database) into what to do:
// the schema version check's own words. Any other error is returned as
// it is.
func explainMissingSchema(ctx context.Context, q store.Querier, l *login, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !slices.Contains([]string{"42P01", "3F000", "42883", "42703"}, pgErr.Code) {
		return err
	}
	st, serr := migrations.ReadStatus(ctx, q, l.schema)
	if serr != nil {
		return fmt.Errorf("%w (and reading its migrations: %v)", err, serr)
	}
	problem := st.Check()
	if problem == nil {
		return err
	}
	return fmt.Errorf("the outbox schema %s on %s is missing or incomplete: %v ('outboxkeeper migrate status' lists each migration)", l.schema, l.target, problem)
}

// describeFill turns fill_state into what the fill is doing; ran says a
// pass has written it since the migrations.
func describeFill(s fill.Status, ran bool) fillReport {
	r := fillReport{
		Started: s.Started, Watermark: s.Watermark, Head: s.Head,
		PassRunning: s.LeaseHeld, LeaseExpiresAt: s.LeaseExpiresAt, PassEverRan: ran,
	}
	if ran {
		at, ago := s.UpdatedAt, max(s.Now.Sub(s.UpdatedAt), 0).Seconds()
		r.LastWriteAt, r.LastWriteAgoS = &at, &ago
	}
	if s.Head > s.Watermark {
		r.Lag = s.Head - s.Watermark
		next := s.Watermark + 1
		r.StalledAt = &next
	}
	if !s.Started {
		r.Waiting = "start"
		return r
	}
	if c := s.Cycle; c != nil {
		r.Cycle = &fill.CycleView{From: c.From, FirstSeenAt: c.FirstSeenAt, Historical: c.Historical, Marker: c.Marker}
		if c.Marker != nil {
			h := c.MarkerHead
			r.Cycle.MarkerHead = &h
		}
		a := max(s.Now.Sub(c.FirstSeenAt), 0).Seconds()
		r.StallAgeS = &a
	}
	if s.ProofBlockedSince != nil {
		b := max(s.Now.Sub(*s.ProofBlockedSince), 0).Seconds()
		r.ProofBlockedS = &b
	}
	switch c := s.Cycle; {
	case r.Lag == 0:
		r.Waiting = ""
	case c == nil:
		r.Waiting = "look"
	case c.Marker == nil:
		r.Waiting = fill.WaitingGrace
	case s.ProofBlockedSince != nil:
		r.Waiting = fill.WaitingProof
	default:
		r.Waiting = "fill"
	}
	return r
}

// assess is the documented rule: every reason a person is needed, in the
// order of its rules.
func assess(r *statusReport, th thresholds) []finding {
	out := []finding{}
	for _, rule := range []func(*statusReport, thresholds) []finding{
		fillSilent, sweepSilent, pruneSilent, stalled, deadDeliveries, openTooLong, retentionHeld, dlqNotEmpty,
	} {
		out = append(out, rule(r, th)...)
	}
	return out
}

// one is a rule's single finding.
func one(name, what, next string) []finding { return []finding{{name, what, next}} }

func fillSilent(r *statusReport, th thresholds) []finding {
	fr := r.Fill
	const next = "check the fill's schedule (ScheduleState), its Errors and its log group"
	if !fr.PassEverRan {
		what := "no fill pass has run since the migrations"
		if fr.Lag > 0 {
			what += fmt.Sprintf("; read_events stops at %d until one proves the gaps", deref(fr.StalledAt))
		}
		return one("fill-silent", what, next)
	}
	if silent := time.Duration(*fr.LastWriteAgoS * float64(time.Second)); silent > th.silentAfter {
		return one("fill-silent", fmt.Sprintf("no fill pass has written its state for %s (last at %s)", age(silent), stamp(fr.LastWriteAt)), next)
	}
	return nil
}

func sweepSilent(r *statusReport, th thresholds) []finding {
	const next = "check the sweep's schedule (ScheduleState), its Errors and its log group"
	switch last := r.Sweep.LastPassAt; {
	case last == nil:
		return one("sweep-silent", "the sweep has never recorded a pass", next)
	case r.At.Sub(*last) > th.silentAfter:
		return one("sweep-silent", fmt.Sprintf("no sweep pass for %s (last at %s)", age(r.At.Sub(*last)), stamp(last)), next)
	}
	return nil
}

// pruneSilent: a prune that never ran is silent from its deployment on: it
// runs hourly, so a new deployment has not seen its first pass yet.
func pruneSilent(r *statusReport, th thresholds) []finding {
	switch p, since := r.Prune.LastPassAt, r.PruneInstalledAt; {
	case p == nil && since != nil && r.At.Sub(*since) > th.pruneSilentAfter:
		return one("prune-silent", fmt.Sprintf("the prune has never recorded a pass, %s after its deployment (%s): nothing was deleted, the tables grow",
			age(r.At.Sub(*since)), stamp(since)),
			"check the prune's schedule (ScheduleState), its Errors and its log group")
	case p != nil && r.At.Sub(*p) > th.pruneSilentAfter:
		return one("prune-silent", fmt.Sprintf("no prune pass for %s (last at %s)", age(r.At.Sub(*p)), stamp(p)),
			"check the prune's schedule and its log group")
	}
	return nil
}

// stalled is a proof blocked past the threshold, or else a watermark
// stalled past it.
func stalled(r *statusReport, th thresholds) []finding {
	fr := r.Fill
	blocked := fr.ProofBlockedS != nil && *fr.ProofBlockedS > th.stalledAfter.Seconds()
	switch {
	case fr.Waiting == fill.WaitingProof && blocked:
		return one("proof-blocked", fmt.Sprintf("the proof of the stall at %d has waited %s on %s", deref(fr.StalledAt), seconds(fr.ProofBlockedS), sessions(len(r.BlockedBy))),
			"end or fix the sessions under BLOCKED BY; as a last resort, 'outboxkeeper skip-stall'")
	case fr.StallAgeS != nil && *fr.StallAgeS > th.stalledAfter.Seconds():
		return one("stalled", fmt.Sprintf("the watermark has stalled at %d for %s (waiting: %s)", fr.Watermark, seconds(fr.StallAgeS), orDash(fr.Waiting)),
			"read the fill's log line (waiting, timed_out) and its Errors")
	}
	return nil
}

func deadDeliveries(r *statusReport, _ thresholds) []finding {
	if n := r.Deliveries.Dead; n > 0 {
		return one("dead", fmt.Sprintf("%d dead %s", n, plural(n, "delivery", "deliveries")),
			"fix the recipient, then 'outboxkeeper dead list' and 'outboxkeeper dead retry'")
	}
	return nil
}

func openTooLong(r *statusReport, th thresholds) []finding {
	if o := r.Deliveries.OldestOpenSeconds; o != nil && *o > th.openAfter.Seconds() {
		return one("relay", fmt.Sprintf("the oldest open delivery is %s old", seconds(o)),
			"the relay is down or behind: check it; the sweep only resets what it pushed")
	}
	return nil
}

// retentionHeld is one finding a consumer that has held retention back
// for heldAfter or longer.
func retentionHeld(r *statusReport, th thresholds) []finding {
	var out []finding
	for _, c := range r.Consumers {
		if c.HoldsRetention && c.HeldSince != nil && r.At.Sub(*c.HeldSince) >= th.heldAfter {
			out = append(out, finding{"retention-held", fmt.Sprintf("%s %s has held retention back for %s (at %d, %d behind the head)",
				consumerKind(c.Name), c.Name, age(r.At.Sub(*c.HeldSince)), c.Position, c.Lag),
				fmt.Sprintf("restart it, or 'outboxkeeper consumers retire --consumer %s' if it stopped for good", c.Name)})
		}
	}
	return out
}

func dlqNotEmpty(r *statusReport, _ thresholds) []finding {
	if d := r.DLQ; d != nil && d.Total() > 0 {
		return one("dlq", fmt.Sprintf("the report DLQ holds %d %s", d.Total(), plural(int64(d.Total()), "message", "messages")),
			"'outboxkeeper dlq list', then 'outboxkeeper dlq redrive'")
	}
	return nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func sessions(n int) string {
	if n == 0 {
		return "no session now (the fill's next tick should pass it)"
	}
	return fmt.Sprintf("%d %s", n, plural(int64(n), "session", "sessions"))
}

// printStatusReport is the status table: its sections in order, each
// printing nothing when it has nothing to say (but FILL, PASSES and the
// verdict).
func printStatusReport(w io.Writer, r *statusReport, th thresholds) error {
	fmt.Fprintf(w, "schema %s on %s, at %s\n\n", r.Schema, r.Database, stamp(&r.At))
	printFill(w, r.Fill)
	for _, section := range []func(io.Writer, *statusReport, thresholds) error{
		printBlockers, printDeliveries, printPasses, printSkips, printConsumerSections, printQueues, printAttention,
	} {
		if err := section(w, r, th); err != nil {
			return err
		}
	}
	return nil
}

// printBlockers is BLOCKED BY, when the fill waits on its proof.
func printBlockers(w io.Writer, r *statusReport, _ thresholds) error {
	if len(r.BlockedBy) == 0 && r.Fill.Waiting != fill.WaitingProof {
		return nil
	}
	fmt.Fprintln(w, "\nBLOCKED BY (sessions holding the xmin horizon at or before the marker)")
	return blockerTable(w, r.BlockedBy)
}

func printDeliveries(w io.Writer, r *statusReport, th thresholds) error {
	d := r.Deliveries
	fmt.Fprintln(w, "\nDELIVERIES")
	_, err := fmt.Fprintf(w, "  open %d (pending %d, delivered %d)   stuck %d (delivered > %s)   dead %d   oldest open %s\n",
		d.Open(), d.Pending, d.Delivered, d.Stuck, age(th.stuckAfter), d.Dead, seconds(d.OldestOpenSeconds))
	return err
}

// printPasses is one row a scheduled pass: when it last did something.
func printPasses(w io.Writer, r *statusReport, _ thresholds) error {
	fr := r.Fill
	fmt.Fprintln(w, "\nPASSES")
	rows := [][]string{
		{"fill", stamp(fr.LastWriteAt), seconds(fr.LastWriteAgoS), fillOutcome(fr)},
		sweepRow(r.At, r.Sweep),
		pruneRow(r.At, r.Prune),
	}
	return indent(w, []string{"FUNCTION", "LAST", "AGO", "OUTCOME"}, rows)
}

func printSkips(w io.Writer, r *statusReport, _ thresholds) error {
	if len(r.Skips) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nSKIPS (the last stalls an operator skipped)")
	var sk [][]string
	for _, s := range r.Skips {
		sk = append(sk, []string{strconv.FormatInt(s.ID, 10), stamp(&s.SkippedAt), s.Operator + " as " + s.DBUser,
			fmt.Sprintf("(%d, %d]", s.FromWatermark, s.ToSequence), strconv.FormatInt(s.Written, 10), s.Reason})
	}
	return indent(w, []string{"ID", "AT", "WHO", "RANGE", "WRITTEN", "REASON"}, sk)
}

// printConsumerSections is CONSUMERS and, when there were any, CONSUMER
// CHANGES.
func printConsumerSections(w io.Writer, r *statusReport, _ thresholds) error {
	fmt.Fprintln(w, "\nCONSUMERS (and relays, relay:<name>; the slowest first)")
	if err := printConsumers(w, r.Consumers, r.At); err != nil {
		return err
	}
	if len(r.ConsumerChanges) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nCONSUMER CHANGES (the last rewinds and retires)")
	return printConsumerChanges(w, r.ConsumerChanges)
}

// printQueues is QUEUES, when a queue's URL was known.
func printQueues(w io.Writer, r *statusReport, _ thresholds) error {
	if r.Queue == nil && r.DLQ == nil {
		return nil
	}
	fmt.Fprintln(w, "\nQUEUES")
	for _, q := range []struct {
		name string
		d    *queuedepth.Depth
	}{{"reports", r.Queue}, {"DLQ", r.DLQ}} {
		if q.d != nil {
			fmt.Fprintf(w, "  %-8s %d visible, %d in flight   %s\n", q.name, q.d.Visible, q.d.InFlight, q.d.URL)
		}
	}
	return nil
}

// printAttention is the verdict: OK, or what needs a person and what to do.
func printAttention(w io.Writer, r *statusReport, _ thresholds) error {
	if len(r.Attention) == 0 {
		_, err := fmt.Fprintln(w, "\nOK: nothing needs a person")
		return err
	}
	fmt.Fprintln(w, "\nNEEDS ATTENTION")
	for _, a := range r.Attention {
		fmt.Fprintf(w, "  %-14s %s\n  %-14s -> %s\n", a.Name, a.What, "", a.Next)
	}
	return nil
}

// printFill is the FILL section of the status table.
func printFill(w io.Writer, fr fillReport) {
	fmt.Fprintln(w, "FILL")
	fmt.Fprintf(w, "  watermark %d   head %d   lag %d\n", fr.Watermark, fr.Head, fr.Lag)
	switch fr.Waiting {
	case "start":
		fmt.Fprintln(w, "  not started: no fill pass has anchored the watermark yet")
		if fr.Lag > 0 {
			fmt.Fprintf(w, "  read_events stops at %d, the first missing sequence, until a fill pass proves it\n", deref(fr.StalledAt))
		}
	case "":
		fmt.Fprintln(w, "  caught up")
	case "look":
		fmt.Fprintln(w, "  behind the head, no stall recorded: catching up (a running pass saves its watermark every few seconds)")
	default:
		fmt.Fprintf(w, "  stalled at %d for %s, waiting for %s\n", deref(fr.StalledAt), seconds(fr.StallAgeS), describeWaiting(fr))
	}
	if c := fr.Cycle; c != nil {
		marker := "no marker yet (in its grace)"
		if c.Marker != nil {
			marker = fmt.Sprintf("marker xid %d proves sequences up to %d", *c.Marker, deref(c.MarkerHead))
		}
		kind := ""
		if c.Historical {
			kind = " (gaps there before the first pass)"
		}
		fmt.Fprintf(w, "  cycle from %d%s since %s: %s\n", c.From, kind, stamp(&c.FirstSeenAt), marker)
	}
	running := "no pass holds the lease"
	if fr.PassRunning {
		running = "a pass holds the lease until " + stamp(fr.LeaseExpiresAt)
	}
	if fr.PassEverRan {
		fmt.Fprintf(w, "  last written %s ago; %s\n", seconds(fr.LastWriteAgoS), running)
	} else {
		fmt.Fprintf(w, "  no fill pass has run since the migrations; %s\n", running)
	}
}

func describeWaiting(fr fillReport) string {
	switch fr.Waiting {
	case fill.WaitingGrace:
		return "its grace (a writer committing late costs no write)"
	case fill.WaitingProof:
		return fmt.Sprintf("its proof, blocked for %s by an older transaction", seconds(fr.ProofBlockedS))
	case "fill":
		return "its placeholders to be written (proof passed)"
	}
	return fr.Waiting
}

func fillOutcome(fr fillReport) string {
	if !fr.PassEverRan {
		return "never ran"
	}
	switch fr.Waiting {
	case "start":
		return "never anchored"
	case "":
		return fmt.Sprintf("caught up at %d", fr.Watermark)
	case "look":
		return fmt.Sprintf("at %d, %d behind", fr.Watermark, fr.Lag)
	}
	return fmt.Sprintf("stalled at %d: %s", deref(fr.StalledAt), fr.Waiting)
}

func sweepRow(now time.Time, s sweep.State) []string {
	if s.LastPassAt == nil {
		return []string{"sweep", "-", "-", "never ran"}
	}
	return []string{"sweep", stamp(s.LastPassAt), age(now.Sub(*s.LastPassAt)),
		fmt.Sprintf("reset %d, dead %d, stuck pending %d (pass %d; %d resets, %d dead in all)",
			s.LastReset, s.LastDead, s.LastStuckPending, s.Passes, s.ResetsTotal, s.DeadTotal)}
}

func pruneRow(now time.Time, s prune.State) []string {
	if s.LastPassAt == nil {
		return []string{"prune", "-", "-", "never ran"}
	}
	return []string{"prune", stamp(s.LastPassAt), age(now.Sub(*s.LastPassAt)),
		fmt.Sprintf("deleted %d deliveries, %d events (pass %d)", s.LastDeletedDeliveries, s.LastDeletedEvents, s.Passes)}
}

// blockerTable is the fill's blocked_by as a table.
func blockerTable(w io.Writer, bs []fill.Blocker) error {
	if len(bs) == 0 {
		_, err := fmt.Fprintln(w, "  none now: the sessions ended; the fill's next tick passes the proof")
		return err
	}
	var rows [][]string
	for _, b := range bs {
		xact := seconds(b.XactAgeSeconds)
		rows = append(rows, []string{strconv.Itoa(int(b.PID)), orDash(b.Database), orDash(b.User), orDash(b.State), xact,
			strconv.FormatInt(b.XIDAge, 10), orDash(b.ApplicationName), orDash(oneLine(b.Query))})
	}
	return indent(w, []string{"PID", "DATABASE", "USER", "STATE", "AGE", "XID AGE", "APPLICATION", "QUERY START"}, rows)
}

// oneLine keeps a query on its table row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// indent is table with a two-space margin.
func indent(w io.Writer, header []string, rows [][]string) error {
	var b strings.Builder
	if err := table(&b, header, rows); err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		if _, err := fmt.Fprintln(w, "  "+strings.TrimRight(line, " ")); err != nil {
			return err
		}
	}
	return nil
}
