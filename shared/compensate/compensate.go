// Package compensate is the logic of functions/compensate (DESIGN §5): it
// fills, at once and exactly, the sequences that writers report they
// abandoned, from a batch of SQS messages, and says per message which ones
// SQS should hand out again.
//
// One batch costs one check statement (allocation head, xid horizon and the
// status of every distinct writer) and one placeholder insert for everything
// fillable, which notifies the range it wrote: never a round trip per
// message or per sequence.
package compensate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkeeper/outboxkeeper/shared/budget"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/metrics"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
	"github.com/outboxkeeper/outboxkeeper/shared/store"
)

// DefaultPassBudget bounds the database work of one batch when the context
// carries no deadline (tests, local tools). Under Lambda the deadline minus
// budget.Margin bounds it.
const DefaultPassBudget = 30 * time.Second

// Options build a Service.
type Options struct {
	// Config is the validated COMPENSATE_* configuration.
	Config config.Compensate
	// Schema holds the outbox tables.
	Schema store.Schema
	// DB runs the statements: in production the pgx pool, which drops a
	// connection that failed and dials a fresh one for the next statement.
	DB store.Querier
	// SQS sends bad input to the DLQ and defers messages.
	SQS SQS
	// Logger receives one line per batch (and one per dropped or
	// undeliverable bad message). Default slog.Default().
	Logger *slog.Logger
	// Metrics receives one EMF line per batch. Default metrics.New("compensate").
	Metrics *metrics.Emitter
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// PassBudget bounds database work and retries; the Lambda deadline
	// minus budget.Margin bounds it further. Default DefaultPassBudget.
	PassBudget time.Duration
}

// Service handles batches of rollback reports. Safe for concurrent use.
type Service struct {
	cfg      config.Compensate
	events   *store.Events
	db       store.Querier
	sqs      SQS
	queues   *queueURLs
	log      *slog.Logger
	metrics  *metrics.Emitter
	now      func() time.Time
	budget   time.Duration
	checkSQL string
}

// New validates the options.
func New(opts Options) (*Service, error) {
	c := opts.Config
	switch {
	case opts.DB == nil:
		return nil, errors.New("compensate: nil DB")
	case opts.SQS == nil:
		return nil, errors.New("compensate: nil SQS client")
	case opts.Schema.Name() == "":
		return nil, errors.New("compensate: no schema")
	case c.MaxSequences < 1:
		return nil, fmt.Errorf("compensate: MaxSequences %d must be at least 1", c.MaxSequences)
	case c.Defer < 0 || c.Defer > 12*time.Hour || c.Defer%time.Second != 0:
		return nil, fmt.Errorf("compensate: Defer %s must be whole seconds between 0s and 12h (SQS visibility)", c.Defer)
	case c.MaxDeferrals < 1:
		return nil, fmt.Errorf("compensate: MaxDeferrals %d must be at least 1", c.MaxDeferrals)
	case c.RetryAttempts < 0:
		return nil, fmt.Errorf("compensate: RetryAttempts %d must not be negative", c.RetryAttempts)
	case c.RetryInterval < 0:
		return nil, fmt.Errorf("compensate: RetryInterval %s must not be negative", c.RetryInterval)
	case opts.PassBudget < 0:
		return nil, fmt.Errorf("compensate: PassBudget %s must not be negative", opts.PassBudget)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New("compensate")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PassBudget == 0 {
		opts.PassBudget = DefaultPassBudget
	}
	return &Service{
		cfg:      c,
		events:   store.NewEvents(opts.Schema),
		db:       opts.DB,
		sqs:      opts.SQS,
		queues:   &queueURLs{client: opts.SQS},
		log:      opts.Logger,
		metrics:  opts.Metrics,
		now:      opts.Now,
		budget:   opts.PassBudget,
		checkSQL: checkSQL(opts.Schema),
	}, nil
}

// checkSQL reads everything a batch needs from the database in one
// statement, assigning no xid (so it holds back no one's horizon): the
// allocation head, to refuse sequences never handed out (§3.5), and the
// status of every distinct reported xid.
//
// pg_xact_status raises "transaction ID is in the future" for an xid not yet
// assigned, which would fail the whole batch for one bogus report, so it is
// only called below pg_snapshot_xmax(pg_current_snapshot()). That xmax is
// NOT the next xid to be assigned, as one might hope: PostgreSQL computes it
// as the latest *completed* xid + 1, so a writer that took its xid after the
// last commit anywhere runs with an xid at or above xmax (seen in
// TestOpenWriterDeferredThenRolledBackFills: writer 783, snapshot 782:782:).
// What xmax does guarantee is that no xid at or above it had finished when
// the snapshot was taken: such a writer is running or never existed, and is
// never fillable. The two are told apart by the lock every transaction holds
// on its own xid for as long as it runs (pg_locks is readable by every
// role): held means "in progress"; not held means "future" — or a writer
// that finished between the snapshot and the lock read, which the caller
// settles by asking once more (re-check) before calling it bad input.
//
// pg_locks shows 32-bit xids, so x::xid drops the epoch: an xid 2^32 above a
// running writer's would match its lock. Running xids lie less than 2^31
// above xmax (wraparound protection keeps them far closer), so anything
// further is future whatever pg_locks says.
//
// CASE evaluates its branches in order and pg_xact_status is volatile, so
// it is never called (nor folded early) for an xid at or above xmax. A NULL
// status means the xid is older than the commit log kept: it ended long
// ago. The head and xmax come from a MATERIALIZED CTE so they are read
// once, not once per xid row.
func checkSQL(schema store.Schema) string {
	return `WITH b AS MATERIALIZED (
		SELECT ` + schema.Table("allocation_head") + `() AS head,
		       pg_snapshot_xmax(pg_current_snapshot()) AS xmax)
	SELECT b.head, b.xmax::text, x::text,
	       CASE WHEN x IS NULL THEN NULL
	            WHEN x < b.xmax THEN coalesce(pg_xact_status(x), '` + StatusTooOld + `')
	            WHEN x::text::numeric - b.xmax::text::numeric < 2147483648
	             AND EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
	                         WHERE l.locktype = 'transactionid' AND l.transactionid = x::xid AND l.granted)
	                 THEN '` + StatusInProgress + `'
	            ELSE '` + StatusFuture + `' END
	FROM b LEFT JOIN unnest($1::text[]::xid8[]) AS x ON true`
}

// Outcomes of one message, as the result reports them.
const (
	OutcomeFilled   = "filled"   // its sequences are present now (written by this batch or before)
	OutcomeDeferred = "deferred" // writer still runs: visibility set, reported failed
	OutcomeDropped  = "dropped"  // writer still runs after MaxDeferrals receives: left to the fill function
	OutcomeInvalid  = "invalid"  // bad input, forwarded to the DLQ
	OutcomeFailed   = "failed"   // reported failed: SQS hands it out again, redrive moves it eventually
)

// Message is the outcome of one SQS message.
type Message struct {
	MessageID string `json:"message_id"`
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason,omitempty"`
}

// Result is one batch: what the log line and the metrics say and what the
// tests assert on. The Lambda response is Response().
type Result struct {
	Received int `json:"received"`
	// Filled is the placeholders this batch wrote; AlreadyPresent the
	// fillable sequences that were present already (committed rows,
	// earlier fills, a duplicate delivery).
	Filled         int `json:"filled"`
	AlreadyPresent int `json:"already_present"`
	Deferred       int `json:"deferred"`
	Dropped        int `json:"dropped"`
	Invalid        int `json:"invalid"`
	// Failed counts messages reported failed for an error (database, DLQ
	// send, no DLQ configured); deferred messages are reported failed too
	// but counted in Deferred only.
	Failed int `json:"failed"`
	// Head is the allocation head the check read (0 if it did not run).
	Head int64 `json:"head"`
	// Statements sent to the database, retries included.
	Statements int64 `json:"statements"`
	// Retries of transient database errors.
	Retries    int       `json:"retries"`
	Error      string    `json:"error,omitempty"`
	DurationMs int64     `json:"duration_ms"`
	Messages   []Message `json:"messages"`
	// FilledRange is the [min, max] notified, when anything was written.
	FilledRange []int64 `json:"filled_range,omitempty"`

	failures []events.SQSBatchItemFailure
}

// Response is the partial batch response: the messages SQS must hand out
// again. Everything else is deleted by the event source mapping.
func (r Result) Response() events.SQSEventResponse {
	return events.SQSEventResponse{BatchItemFailures: slices.Clone(r.failures)}
}

// Handle is the Lambda handler. It never returns an error: an error would
// fail the whole batch, and failures are reported per message.
func (s *Service) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	return s.Process(ctx, ev).Response(), nil
}

// item is one message through the batch.
type item struct {
	msg     *events.SQSMessage
	rep     report.Report
	verdict Verdict
	reason  string
	// dbFailed: the decision or the insert needed the database, which
	// could not be reached within the retries.
	dbFailed bool
}

// Process handles one batch and returns its result.
func (s *Service) Process(ctx context.Context, ev events.SQSEvent) Result {
	start := s.now()
	end := start.Add(budget.For(ctx, s.budget, start))
	q := &store.Counting{Q: s.db}
	res := Result{Received: len(ev.Records)}

	// 1. Everything that needs no database.
	items := make([]item, len(ev.Records))
	var pending []*item // parsed, awaiting the database check
	for i := range ev.Records {
		it := &items[i]
		it.msg = &ev.Records[i]
		rep, err := report.Parse([]byte(it.msg.Body), s.cfg.MaxSequences)
		if err != nil {
			it.verdict, it.reason = Invalid, reasonOf(err)
			continue
		}
		it.rep = rep
		pending = append(pending, it)
	}

	// 2. One check for the whole batch.
	if len(pending) > 0 {
		xids := distinctXIDs(pending)
		var check Check
		err := s.retry(ctx, end, &res, func(ctx context.Context) error {
			var err error
			check, err = s.check(ctx, q, xids)
			return err
		})
		if future := check.future(); err == nil && len(future) > 0 {
			// Rare: a report naming an xid at or above xmax that holds no
			// lock. Either it is bogus, or its writer finished between the
			// snapshot and the lock read; a fresh snapshot tells which.
			err = s.retry(ctx, end, &res, func(ctx context.Context) error {
				again, err := s.check(ctx, q, future)
				for x, status := range again.Status {
					check.Status[x] = status
				}
				return err
			})
		}
		if err != nil {
			res.Error = "check: " + err.Error()
			for _, it := range pending {
				it.dbFailed = true
			}
			pending = nil
		} else {
			res.Head = check.Head
		}
		for _, it := range pending {
			it.verdict, it.reason = Decide(it.rep, receiveCount(it.msg), check, s.cfg.MaxDeferrals)
		}
	}

	// 3. One insert for everything fillable in the batch.
	//
	// No transaction spans the check and the insert, on purpose: a
	// transaction would hold a snapshot (and, once the insert assigns an
	// xid, the fill function's proof horizon) for nothing, because the
	// check's facts cannot go stale in the unsafe direction:
	//   - committed, aborted and "too old" are final: a finished writer
	//     never writes again, so its missing sequences stay missing;
	//   - an "in progress" writer is deferred, never filled, so a writer
	//     that commits between the check and the insert is never raced;
	//   - the head only grows, so "at or below the head" stays true;
	//   - whatever row does exist — committed by the writer (a COMMIT that
	//     in fact landed before an InTx report), written by the fill
	//     function or by a concurrent compensate — is kept by ON CONFLICT
	//     DO NOTHING, which never overwrites (§3.5). A writer's row still
	//     uncommitted makes the insert wait for that writer and then skip
	//     the row if it committed.
	// So each statement is safe alone, and each is idempotent, which is
	// also why retrying one after a dropped connection is safe.
	var fillable []*item
	set := map[int64]struct{}{}
	for i := range items {
		if it := &items[i]; it.verdict == Fill {
			fillable = append(fillable, it)
			for _, seq := range it.rep.Sequences {
				set[seq] = struct{}{}
			}
		}
	}
	if len(set) > 0 {
		// Ascending order matters: concurrent handlers inserting
		// overlapping sets in the same order wait on each other's
		// speculative insertions in one direction only, so they cannot
		// deadlock (and a deadlock would only cost a retry anyway).
		seqs := slices.Sorted(maps.Keys(set))
		var wrote store.Written
		err := s.retry(ctx, end, &res, func(ctx context.Context) error {
			var err error
			wrote, err = s.events.InsertPlaceholders(ctx, q, seqs, store.FilledByCompensate)
			return err
		})
		if err != nil {
			res.Error = joinErr(res.Error, "insert: "+err.Error())
			for _, it := range fillable {
				it.dbFailed = true
			}
		} else {
			res.Filled = int(wrote.N)
			res.AlreadyPresent = len(seqs) - int(wrote.N)
			if wrote.N > 0 {
				// Notified by the insert statement itself.
				res.FilledRange = []int64{wrote.Min, wrote.Max}
			}
		}
	}

	// 4. SQS side effects and the per-message outcome.
	for i := range items {
		res.Messages = append(res.Messages, s.settle(ctx, &items[i], &res))
	}

	res.Statements = q.Count()
	res.DurationMs = s.now().Sub(start).Milliseconds()
	s.record(ctx, res)
	return res
}

// settle turns an item's verdict into its outcome, sending it to the DLQ or
// deferring it as needed.
func (s *Service) settle(ctx context.Context, it *item, res *Result) Message {
	m := Message{MessageID: it.msg.MessageId, Reason: it.reason}
	fail := func(reason string) Message {
		res.Failed++
		res.failures = append(res.failures, events.SQSBatchItemFailure{ItemIdentifier: it.msg.MessageId})
		m.Outcome, m.Reason = OutcomeFailed, reason
		return m
	}
	if it.dbFailed {
		// Nothing is lost: SQS hands it out again after its visibility
		// timeout, and after maxReceiveCount moves it to the redrive DLQ;
		// whatever is still missing by then the fill function proves and
		// fills.
		return fail("database unavailable: " + res.Error)
	}
	switch it.verdict {
	case Fill:
		m.Outcome = OutcomeFilled
		return m
	case Invalid:
		res.Invalid++
		if s.cfg.DLQURL == "" {
			// The queue's own redrive policy moves it after maxReceiveCount.
			s.log.WarnContext(ctx, "compensate: bad rollback report and no COMPENSATE_DLQ_URL: reported failed for the redrive policy",
				"message_id", it.msg.MessageId, "reason", it.reason)
			return fail("invalid: " + it.reason + " (no DLQ configured)")
		}
		if err := s.toDLQ(ctx, it); err != nil {
			// Not deleted from the source queue, so it is not lost either.
			return fail("invalid: " + it.reason + "; DLQ send failed: " + err.Error())
		}
		m.Outcome = OutcomeInvalid
		return m
	case Defer:
		res.Deferred++
		if err := s.deferMessage(ctx, it.msg); err != nil {
			// Still reported failed: it comes back after the queue's
			// visibility timeout instead of COMPENSATE_DEFER.
			m.Reason += "; visibility change failed: " + err.Error()
		}
		res.failures = append(res.failures, events.SQSBatchItemFailure{ItemIdentifier: it.msg.MessageId})
		m.Outcome = OutcomeDeferred
		return m
	case Drop:
		res.Dropped++
		s.log.WarnContext(ctx, "compensate: writer still in progress after the maximum deferrals; dropping the report, the fill function will prove and fill these sequences",
			"message_id", it.msg.MessageId, "xid", it.rep.XID, "sequences", len(it.rep.Sequences),
			"receive_count", receiveCount(it.msg))
		m.Outcome = OutcomeDropped
		return m
	}
	return fail(fmt.Sprintf("no verdict (%v)", it.verdict))
}

// toDLQ forwards the original body unchanged, with the reason.
func (s *Service) toDLQ(ctx context.Context, it *item) error {
	_, err := s.sqs.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:    aws.String(s.cfg.DLQURL),
		MessageBody: aws.String(it.msg.Body),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			"error": {DataType: aws.String("String"), StringValue: aws.String(it.reason)},
		},
	})
	return err
}

func (s *Service) deferMessage(ctx context.Context, msg *events.SQSMessage) error {
	url, err := s.queues.lookup(ctx, msg.EventSourceARN)
	if err != nil {
		return err
	}
	_, err = s.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(url),
		ReceiptHandle:     aws.String(msg.ReceiptHandle),
		VisibilityTimeout: int32(s.cfg.Defer / time.Second),
	})
	return err
}

// check runs checkSQL.
func (s *Service) check(ctx context.Context, q store.Querier, xids []string) (Check, error) {
	rows, err := q.Query(ctx, s.checkSQL, xids)
	if err != nil {
		return Check{}, fmt.Errorf("check writers: %w", err)
	}
	defer rows.Close()
	c := Check{Status: map[uint64]string{}}
	for rows.Next() {
		var xmax string
		var x, status *string
		if err := rows.Scan(&c.Head, &xmax, &x, &status); err != nil {
			return Check{}, fmt.Errorf("check writers: %w", err)
		}
		if c.XMax, err = strconv.ParseUint(xmax, 10, 64); err != nil {
			return Check{}, fmt.Errorf("check writers: xmax %q: %w", xmax, err)
		}
		if x != nil && status != nil {
			v, err := strconv.ParseUint(*x, 10, 64)
			if err != nil {
				return Check{}, fmt.Errorf("check writers: xid %q: %w", *x, err)
			}
			c.Status[v] = *status
		}
	}
	if err := rows.Err(); err != nil {
		return Check{}, fmt.Errorf("check writers: %w", err)
	}
	return c, nil
}

// retry runs fn until it succeeds, fails for good, or the retries
// (RetryAttempts after the first try) or the budget run out. Each attempt is bounded by the budget's end, so a hung
// connection cannot overrun the Lambda deadline.
func (s *Service) retry(ctx context.Context, end time.Time, res *Result, fn func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithDeadline(ctx, end)
		err := fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		if !store.Transient(err) || attempt > s.cfg.RetryAttempts || !s.now().Add(s.cfg.RetryInterval).Before(end) {
			return err
		}
		res.Retries++
		if err := budget.Sleep(ctx, s.cfg.RetryInterval); err != nil {
			return err
		}
	}
}

// record writes the batch's log line and metrics.
// The context carries the Lambda request, which the logger turns into the
// line's requestId.
func (s *Service) record(ctx context.Context, res Result) {
	level := slog.LevelInfo
	if res.Failed > 0 {
		level = slog.LevelWarn
	}
	s.log.Log(ctx, level, "compensate batch",
		"received", res.Received, "filled", res.Filled, "already_present", res.AlreadyPresent,
		"deferred", res.Deferred, "dropped", res.Dropped, "invalid", res.Invalid, "failed", res.Failed,
		"head", res.Head, "statements", res.Statements, "retries", res.Retries,
		"duration_ms", res.DurationMs, "error", res.Error, "messages", res.Messages)
	if err := s.metrics.Emit(
		metrics.Metric{Name: "Received", Unit: metrics.Count, Value: float64(res.Received)},
		metrics.Metric{Name: "Filled", Unit: metrics.Count, Value: float64(res.Filled)},
		metrics.Metric{Name: "AlreadyPresent", Unit: metrics.Count, Value: float64(res.AlreadyPresent)},
		metrics.Metric{Name: "Deferred", Unit: metrics.Count, Value: float64(res.Deferred)},
		metrics.Metric{Name: "Dropped", Unit: metrics.Count, Value: float64(res.Dropped)},
		metrics.Metric{Name: "Invalid", Unit: metrics.Count, Value: float64(res.Invalid)},
		metrics.Metric{Name: "Failed", Unit: metrics.Count, Value: float64(res.Failed)},
		metrics.Metric{Name: "DurationMs", Unit: metrics.Milliseconds, Value: float64(res.DurationMs)},
	); err != nil {
		s.log.ErrorContext(ctx, "compensate: emit metrics", "error", err)
	}
}

// receiveCount is SQS's ApproximateReceiveCount, 1 when absent (the event
// source mapping always sends it; a hand-made event may not).
func receiveCount(m *events.SQSMessage) int {
	n, err := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

func distinctXIDs(items []*item) []string {
	seen := map[uint64]struct{}{}
	out := []string{}
	for _, it := range items {
		if !it.rep.HasXID {
			continue
		}
		if _, ok := seen[it.rep.XID]; !ok {
			seen[it.rep.XID] = struct{}{}
			out = append(out, strconv.FormatUint(it.rep.XID, 10))
		}
	}
	return out
}

func reasonOf(err error) string {
	var inv *report.InvalidError
	if errors.As(err, &inv) {
		return inv.Reason
	}
	return err.Error()
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
