package target

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Message is one message to send.
type Message struct {
	// ID is the caller's name for the message, copied into its Outcome
	// (the relay uses the sequence). The Sender does not send it.
	ID string
	// Body is the message: the SQS or SNS body, the EventBridge Detail (a
	// JSON object), the Kinesis record's data.
	Body []byte
	// Group orders messages: those with one Group go in the order given,
	// never in concurrent calls, and none is sent after one of them failed.
	// On FIFO targets it is the MessageGroupId (required), on Kinesis the
	// partition key (required). Empty on a standard SQS or SNS target or on
	// EventBridge: no order, and never held.
	Group string
	// DedupID is the MessageDeduplicationId on FIFO targets (required
	// there; DedupID builds the relay's). Other targets have none.
	DedupID string
	// Type is EventBridge's DetailType (the relay's topic); unused
	// elsewhere.
	Type string
}

// Outcome is what became of one message.
type Outcome struct {
	ID     string
	Status Status
	// Code and Message are the target's error code and message for a
	// failure (or the Sender's own Code* for one it decided without a call).
	Code    string
	Message string
	// Behind is, for a Held message, the ID of its group's message that
	// failed.
	Behind string
}

// Result reports a Send: an Outcome per message in the order given.
type Result struct {
	Outcomes []Outcome
	// Calls is how many API calls the Send made.
	Calls int
	// Sent, Transient, Permanent and Held count the Outcomes by Status.
	Sent, Transient, Permanent, Held int
}

// Config configures a Sender.
type Config struct {
	Target Target
	// Source is the EventBridge Source of every event (RELAY_SOURCE):
	// required for an EventBridge target, and not one of AWS's own (aws.*).
	// Unused for other kinds.
	Source string
	// Concurrency is how many calls may be in flight at once (default 4).
	// Calls carrying one group are never among them together.
	Concurrency int
	// Limits bound every call; zero fields take DefaultLimits(kind), and
	// none may exceed MaxLimits(kind).
	Limits Limits
}

const defaultConcurrency = 4

// Sender sends messages to one target with its service's SDK client. It is
// safe for concurrent use; each Send is independent of the others.
type Sender struct {
	cfg Config
	api api
}

// api is one service's batch call.
type api interface {
	// size is the message's size as the service counts it against its
	// limits.
	size(m *Message) int
	// check is the code and message of a refusal the service would make
	// of the message whatever else is in the call; "" when there is none.
	check(m *Message) (code, message string)
	// put makes one call with batch (at most Limits.Entries messages of at
	// most Limits.CallBytes in all) and returns an answer per message in
	// batch's order, or the error of the call as a whole.
	put(ctx context.Context, batch []*Message) ([]answer, error)
}

// answer is the service's word on one entry of a call.
type answer struct {
	ok            bool
	code, message string
}

// New makes a Sender for cfg.Target with the SDK client of its kind, built
// from awsCfg (awsenv.Load on Lambda: region, credentials and the
// AWS_ENDPOINT_URL_<SERVICE> overrides). A bad Config is an error naming
// the field.
func New(awsCfg aws.Config, cfg Config) (*Sender, error) {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = defaultConcurrency
	}
	if cfg.Concurrency < 1 {
		return nil, fmt.Errorf("target: Concurrency %d: must be at least 1", cfg.Concurrency)
	}
	limits, err := cfg.Limits.withDefaults(cfg.Target.Kind)
	if err != nil && cfg.Target.Kind != "" {
		return nil, err
	}
	cfg.Limits = limits
	s := &Sender{cfg: cfg}
	switch cfg.Target.Kind {
	case SQS:
		if cfg.Target.URL == "" {
			return nil, fmt.Errorf("target: %s: an SQS target needs its queue URL (use Parse)", cfg.Target)
		}
		s.api = newSQS(awsCfg, cfg.Target)
	case SNS:
		s.api = newSNS(awsCfg, cfg.Target)
	case EventBridge:
		if err := CheckSource(cfg.Source); err != nil {
			return nil, err
		}
		s.api = newEventBridge(awsCfg, cfg.Target, cfg.Source)
	case Kinesis:
		s.api = newKinesis(awsCfg, cfg.Target)
	default:
		return nil, fmt.Errorf("target: Target.Kind %q: not a target (use Parse)", cfg.Target.Kind)
	}
	return s, nil
}

// CheckSource says why source cannot be the Source of an EventBridge
// target's events (RELAY_SOURCE), or nil.
func CheckSource(source string) error {
	switch {
	case source == "":
		return errors.New("target: Source is required for an EventBridge target")
	case len(source) > 256:
		return fmt.Errorf("target: Source %q: at most 256 characters", source)
	case strings.HasPrefix(source, "aws."):
		// EventBridge refuses custom events from AWS's own sources.
		return fmt.Errorf("target: Source %q: the aws. prefix is reserved for AWS services", source)
	}
	return nil
}

// Target is the target the Sender sends to.
func (s *Sender) Target() Target { return s.cfg.Target }

// Limits are the limits its calls keep to.
func (s *Sender) Limits() Limits { return s.cfg.Limits }

// Size is m's size as the target counts it against Limits: what a caller
// needs to fill batches of its own.
func (s *Sender) Size(m Message) int { return s.api.size(&m) }

// Send sends msgs and reports each. Every call is bounded by ctx: when ctx
// ends, the call in flight fails Transient (CodeDeadlineExceeded) and no
// further call is made; the messages never sent are Transient too.
//
// Within a call the target may accept messages of a group after one it
// refused (every service here answers per entry); those are reported Sent.
// A caller that keeps order commits a group only up to its first failure
// and resends from there, with the same dedup ids.
func (s *Sender) Send(ctx context.Context, msgs []Message) Result {
	res := Result{Outcomes: make([]Outcome, len(msgs))}
	run := &sendRun{s: s, msgs: msgs, out: res.Outcomes, failed: map[string]string{}}
	// Messages the target could never take fail here, and hold their group
	// like any other failure.
	ok := make([]int, 0, len(msgs))
	for i := range msgs {
		run.out[i].ID = msgs[i].ID
		if code, msg := s.precheck(&msgs[i]); code != "" {
			run.fail(i, Permanent, code, msg)
			continue
		}
		if run.heldBehind(i) {
			continue
		}
		ok = append(ok, i)
	}
	lanes := plan(msgs, ok, s.laneCount(len(ok)))
	var wg sync.WaitGroup
	for _, lane := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run.lane(ctx, lane)
		}()
	}
	wg.Wait()
	res.Calls = int(run.calls.Load())
	for _, o := range res.Outcomes {
		switch o.Status {
		case Sent:
			res.Sent++
		case Transient:
			res.Transient++
		case Permanent:
			res.Permanent++
		case Held:
			res.Held++
		}
	}
	return res
}

func (s *Sender) precheck(m *Message) (code, message string) {
	if n := s.api.size(m); n > s.cfg.Limits.EntryBytes {
		return CodeTooLarge, fmt.Sprintf("%d bytes as %s counts them; it takes at most %d", n, s.cfg.Target.Kind, s.cfg.Limits.EntryBytes)
	}
	return s.api.check(m)
}

// laneCount is how many lanes n messages go in: no more than the
// concurrency, and no more than calls full of them would need, so a small
// Send still fills its calls rather than spreading thin.
func (s *Sender) laneCount(n int) int {
	calls := (n + s.cfg.Limits.Entries - 1) / s.cfg.Limits.Entries
	return max(1, min(s.cfg.Concurrency, calls))
}

// plan deals the messages at indexes ok (ascending) into lanes: all of a
// group in one lane, so its calls run one after another in order; groups,
// biggest first, to the least loaded lane, then the ungrouped messages one
// by one to the least loaded. Each lane keeps the messages' order.
func plan(msgs []Message, ok []int, lanes int) [][]int {
	type group struct {
		name  string
		first int
		idx   []int
	}
	byName := map[string]*group{}
	var groups []*group
	var loose []int
	for _, i := range ok {
		g := msgs[i].Group
		if g == "" {
			loose = append(loose, i)
			continue
		}
		if byName[g] == nil {
			byName[g] = &group{name: g, first: i}
			groups = append(groups, byName[g])
		}
		byName[g].idx = append(byName[g].idx, i)
	}
	slices.SortStableFunc(groups, func(a, b *group) int { return cmp.Compare(len(b.idx), len(a.idx)) })
	out := make([][]int, lanes)
	least := func() int {
		l := 0
		for j := range out {
			if len(out[j]) < len(out[l]) {
				l = j
			}
		}
		return l
	}
	for _, g := range groups {
		l := least()
		out[l] = append(out[l], g.idx...)
	}
	for _, i := range loose {
		l := least()
		out[l] = append(out[l], i)
	}
	for j := range out {
		slices.Sort(out[j])
	}
	return slices.DeleteFunc(out, func(l []int) bool { return len(l) == 0 })
}

// sendRun is the state of one Send.
type sendRun struct {
	s     *Sender
	msgs  []Message
	out   []Outcome
	calls atomic.Int64

	mu sync.Mutex
	// failed maps a group to the ID of its first failed message. Only the
	// group's own lane writes and reads it after the precheck, but lanes
	// share the map.
	failed map[string]string
}

func (r *sendRun) fail(i int, st Status, code, message string) {
	r.out[i].Status, r.out[i].Code, r.out[i].Message = st, code, message
	if g := r.msgs[i].Group; g != "" {
		r.mu.Lock()
		if _, ok := r.failed[g]; !ok {
			r.failed[g] = r.msgs[i].ID
		}
		r.mu.Unlock()
	}
}

// heldBehind marks message i Held when its group already failed.
func (r *sendRun) heldBehind(i int) bool {
	g := r.msgs[i].Group
	if g == "" {
		return false
	}
	r.mu.Lock()
	behind, ok := r.failed[g]
	r.mu.Unlock()
	if ok {
		r.out[i] = Outcome{ID: r.msgs[i].ID, Status: Held, Message: "an earlier message of its group failed", Behind: behind}
	}
	return ok
}

// lane sends its messages in order, a call at a time.
func (r *sendRun) lane(ctx context.Context, idx []int) {
	lim := r.s.cfg.Limits
	batch := make([]*Message, 0, lim.Entries)
	at := make([]int, 0, lim.Entries)
	for pos := 0; pos < len(idx); {
		start := pos
		batch, at = batch[:0], at[:0]
		bytes := 0
		for ; pos < len(idx) && len(batch) < lim.Entries; pos++ {
			i := idx[pos]
			if r.heldBehind(i) {
				continue
			}
			n := r.s.api.size(&r.msgs[i])
			if len(batch) > 0 && bytes+n > lim.CallBytes {
				break
			}
			batch, at, bytes = append(batch, &r.msgs[i]), append(at, i), bytes+n
		}
		if len(batch) == 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			r.unsent(idx[start:], err)
			return
		}
		r.call(ctx, batch, at)
	}
}

// unsent marks the messages at idx that have no outcome yet Transient:
// ctx ended before their call.
func (r *sendRun) unsent(idx []int, err error) {
	code, message, _ := callError(err)
	for _, i := range idx {
		if r.out[i].Status == 0 && !r.heldBehind(i) {
			r.fail(i, Transient, code, message)
		}
	}
}

// call makes one call and records its answers. A call refused as a whole
// for its content cannot say which message is at fault, so each of its
// messages is sent again alone: the guilty one fails permanent, the others
// go through.
func (r *sendRun) call(ctx context.Context, batch []*Message, at []int) {
	r.calls.Add(1)
	answers, err := r.s.api.put(ctx, batch)
	if err != nil {
		code, message, st := callError(err)
		if st == Permanent && len(batch) > 1 {
			for k := range batch {
				if r.heldBehind(at[k]) {
					continue
				}
				if err := ctx.Err(); err != nil {
					r.unsent(at[k:], err)
					return
				}
				r.call(ctx, batch[k:k+1], at[k:k+1])
			}
			return
		}
		for _, i := range at {
			r.fail(i, st, code, message)
		}
		return
	}
	for k, i := range at {
		a := answers[k]
		switch {
		case a.ok:
			r.out[i].Status = Sent
		case a.code == CodeNotAcknowledged:
			r.fail(i, Transient, a.code, a.message)
		default:
			r.fail(i, classify(a.code), a.code, a.message)
		}
	}
}
