package relay

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxkeeper/outboxkeeper/shared/target"
)

// The relay's decisions, each a small pure function: which topics it
// sends, which group an event is in, what a batch's entries become, where
// the position may move after a send, which entries go again, when a
// refused event is parked, and how long to wait after a failure.

// ---------------------------------------------------------------- topics

// Topics is RELAY_TOPICS compiled: comma-separated patterns in which `*`
// matches any run of characters (none included) and every other
// character itself. A topic matching any pattern is sent.
type Topics struct{ patterns []string }

// ParseTopics reads s. A pattern that can match no topic is an error
// naming it: one empty after trimming (a stray comma), or one with a
// character no topic can hold (a NUL, or bytes that are not UTF-8:
// PostgreSQL's text holds neither).
func ParseTopics(s string) (Topics, error) {
	patterns, err := splitList(s, "pattern", "topic",
		"an empty pattern (a stray comma?) matches no topic: want comma-separated patterns such as orders.*,billing.invoice.*")
	if err != nil {
		return Topics{}, err
	}
	return Topics{patterns: patterns}, nil
}

// splitList splits a comma-separated list of entries, each trimmed. An
// entry that can match no value is an error naming it: one empty after
// trimming (a stray comma; empty says what to write), or one holding a
// character no value of the column can (a NUL, or bytes that are not
// UTF-8: PostgreSQL's text holds neither).
func splitList(s, entry, column, empty string) ([]string, error) {
	var out []string
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
			return nil, errors.New(empty)
		case strings.ContainsRune(e, 0):
			return nil, fmt.Errorf("%s %q holds a NUL, which no %s can hold", entry, e, column)
		case !utf8.ValidString(e):
			return nil, fmt.Errorf("%s %q is not UTF-8, which every %s is", entry, e, column)
		}
		out = append(out, e)
	}
	return out, nil
}

// Match says topic is one of the relay's.
func (t Topics) Match(topic string) bool {
	for _, p := range t.patterns {
		if matchGlob(p, topic) {
			return true
		}
	}
	return false
}

// String is the patterns as RELAY_TOPICS takes them.
func (t Topics) String() string { return strings.Join(t.patterns, ",") }

// matchGlob matches s against pattern, where `*` is any run of bytes: the
// classic greedy match that backtracks only to the last star, linear in
// practice and at worst len(pattern)×len(s), never exponential.
func matchGlob(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			// The last star takes one more byte.
			p, mark = star+1, mark+1
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// ---------------------------------------------------------------- aggregate types

// AggregateTypes is RELAY_AGGREGATE_TYPES compiled: comma-separated
// aggregate_type values, each matched exactly. Empty selects every event;
// otherwise an event is sent only if its aggregate_type is listed, so one
// without an aggregate_type is not.
type AggregateTypes struct{ types map[string]bool }

// ParseAggregateTypes reads s. An empty entry between commas (a stray
// comma) is an error, as a name no aggregate_type can hold (a NUL, bytes
// that are not UTF-8) is.
func ParseAggregateTypes(s string) (AggregateTypes, error) {
	if strings.TrimSpace(s) == "" {
		return AggregateTypes{}, nil
	}
	names, err := splitList(s, "aggregate type", "aggregate_type",
		"an empty aggregate type (a stray comma?) matches no event: want comma-separated names such as order,invoice, or nothing for all")
	if err != nil {
		return AggregateTypes{}, err
	}
	a := AggregateTypes{types: map[string]bool{}}
	for _, n := range names {
		a.types[n] = true
	}
	return a, nil
}

// Match says an event of aggregate type t is one of the relay's.
func (a AggregateTypes) Match(t string) bool { return a.types == nil || a.types[t] }

// ---------------------------------------------------------------- groups

// GroupBy is RELAY_GROUP_BY: what orders events.
type GroupBy struct {
	// kind is topic, none or header.
	kind   string
	header string
}

// The kinds of GroupBy; any other value of RELAY_GROUP_BY names a header.
const (
	GroupByTopic = "topic"
	GroupByNone  = "none"
	// GroupByAggregateID groups by the aggregate_id routing column.
	GroupByAggregateID = "aggregate_id"
	groupHeader        = "header"
)

// ParseGroupBy reads RELAY_GROUP_BY: topic, none, aggregate_id, or a
// header's name.
func ParseGroupBy(s string) (GroupBy, error) {
	switch s = strings.TrimSpace(s); s {
	case "", GroupByTopic:
		return GroupBy{kind: GroupByTopic}, nil
	case GroupByNone:
		return GroupBy{kind: GroupByNone}, nil
	case GroupByAggregateID:
		return GroupBy{kind: GroupByAggregateID}, nil
	}
	if strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
		return GroupBy{}, fmt.Errorf("header name %q cannot be a JSON key of headers", s)
	}
	return GroupBy{kind: groupHeader, header: s}, nil
}

// None says events are not ordered at all.
func (g GroupBy) None() bool { return g.kind == GroupByNone }

func (g GroupBy) String() string {
	if g.kind == groupHeader {
		return g.header
	}
	return g.kind
}

// of is an event's group: its topic; its header's value or its
// aggregate_id (an event without one is grouped by its topic, which keeps
// its order among its topic's other such events: falling back never
// orders less than the topic would); or none. A Kinesis record needs a
// partition key all the same, so there none gives each event its own: the
// sequence.
func (g GroupBy) of(e event, kind target.Kind) string {
	switch g.kind {
	case GroupByTopic:
		return e.Topic
	case groupHeader:
		if v, ok := e.header(g.header); ok {
			return v
		}
		return e.Topic
	case GroupByAggregateID:
		if e.AggregateID != "" {
			return e.AggregateID
		}
		return e.Topic
	}
	if kind == target.Kinesis {
		return strconv.FormatInt(e.Sequence, 10)
	}
	return ""
}

// ---------------------------------------------------------------- entries

// state is where an entry of a batch stands.
type state uint8

const (
	// pending: to be sent (again).
	pending state = iota
	// sent: the target accepted it.
	sent
	// skipped: a placeholder, or a topic this relay does not send.
	skipped
	// parked: refused RELAY_MAX_ATTEMPTS times, recorded, passed.
	parked
)

func (s state) resolved() bool { return s != pending }

// entry is one event of a batch.
type entry struct {
	seq   int64
	topic string
	state state
	msg   target.Message
	// bad says why the event's envelope could not be built: it is refused
	// without a send, as the target would refuse it.
	bad string
}

// plan turns a batch read into entries: placeholders and events of other
// topics or aggregate types are skipped (never sent; the position passes them), the rest are
// pending messages, in sequence order.
func (s *Service) plan(events []event) []entry {
	entries := make([]entry, len(events))
	for i, e := range events {
		en := entry{seq: e.Sequence, topic: e.Topic}
		switch {
		case e.Placeholder():
			en.state = skipped
		case !s.topics.Match(e.Topic), !s.aggregateTypes.Match(e.AggregateType):
			en.state = skipped
		default:
			var err error
			if en.msg, err = s.message(e); err != nil {
				en.bad = err.Error()
			}
		}
		entries[i] = en
	}
	return entries
}

// CodeInvalidEnvelope is the refusal of an event whose envelope cannot be
// built (its stored JSON does not parse).
const CodeInvalidEnvelope = "InvalidEnvelope"

// message is e as the target's message: the envelope, its group and its
// dedup id.
func (s *Service) message(e event) (target.Message, error) {
	body, err := target.Envelope(target.Event{Sequence: e.Sequence, Topic: e.Topic, RecordedAt: e.RecordedAt, Headers: e.Headers, Payload: e.Payload})
	return target.Message{
		ID:      strconv.FormatInt(e.Sequence, 10),
		Body:    body,
		Group:   s.groupBy.of(e, s.target.Kind),
		DedupID: target.DedupID(s.cfg.Schema, e.Sequence),
		Type:    e.Topic,
	}, err
}

// toSend is what a send (the first or a later one) carries: the indexes of
// the entries still pending, in order. Entries already sent are not sent
// again. An entry whose envelope could not be built is refused here, and
// holds the rest of its group back as a refusal by the target would.
func toSend(entries []entry) (idx []int, refused []refusal) {
	broken := map[string]bool{}
	for i := range entries {
		en := &entries[i]
		if en.state != pending {
			continue
		}
		g := en.msg.Group
		switch {
		case g != "" && broken[g]:
			continue
		case en.bad != "":
			refused = append(refused, refusal{index: i, code: CodeInvalidEnvelope, message: en.bad})
			if g != "" {
				broken[g] = true
			}
			continue
		}
		idx = append(idx, i)
	}
	return idx, refused
}

// refusal is an entry the target refused for the event itself.
type refusal struct {
	index         int
	code, message string
}

// settle applies a send of entries[idx] (the Send's outcomes, in idx's
// order): a message the target accepted is sent, unless an earlier message
// of its group in this send was not — the service may accept a group's
// later entries after refusing one in the same call, and those go again
// with it, so that nothing past a group's first failure counts as sent
// (their dedup ids make a FIFO target drop the repeats). It returns the
// permanent refusals, for the attempts, and how many failed transiently.
func settle(entries []entry, idx []int, outcomes []target.Outcome) (refused []refusal, transient int) {
	broken := map[string]bool{}
	for k, i := range idx {
		o := outcomes[k]
		g := entries[i].msg.Group
		if o.Status == target.Sent && (g == "" || !broken[g]) {
			entries[i].state = sent
			continue
		}
		if g != "" {
			broken[g] = true
		}
		switch o.Status {
		case target.Permanent:
			refused = append(refused, refusal{index: i, code: o.Code, message: o.Message})
		case target.Transient:
			transient++
		}
	}
	return refused, transient
}

// advance is the position a batch read after from allows: the highest
// sequence s such that every entry up to s is resolved (sent, skipped or
// parked). Nothing past the first unresolved entry is committed, so the
// retry resends from there.
func advance(from int64, entries []entry) int64 {
	pos := from
	for i := range entries {
		if !entries[i].state.resolved() {
			break
		}
		pos = entries[i].seq
	}
	return pos
}

// resolved says every entry is.
func resolved(entries []entry) bool {
	for i := range entries {
		if !entries[i].state.resolved() {
			return false
		}
	}
	return true
}

// roundCalls is how many calls each lane makes in one round of a batch.
const roundCalls = 10

// roundSize is the most messages one send of a batch carries: a few calls
// a lane. Between rounds the pass commits what went, renews its lease and
// hands it over if a successor waits, so no send outlasts the lease (four
// ticks) however large the batch, and a crash or a hand-over repeats at
// most a round.
func roundSize(entries, concurrency int) int { return entries * concurrency * roundCalls }

// ---------------------------------------------------------------- attempts

// tryOutcome is a refused event's attempts after one more refusal, and
// whether that parks it: at maxAttempts, or never when maxAttempts is
// NeverPark (the relay then stops at the event).
func tryOutcome(prior, maxAttempts int) (attempts int, park bool) {
	attempts = prior + 1
	return attempts, maxAttempts != NeverPark && attempts >= maxAttempts
}

// ---------------------------------------------------------------- waiting

// maxBackoff caps the wait after failed sends: a target that comes back is
// used again within it.
const maxBackoff = 5 * time.Second

// backoff is the wait before sending again after failures failed sends in
// a row: a tick, doubled each time, at most maxBackoff (and never less than
// a tick).
func backoff(tick time.Duration, failures int) time.Duration {
	d := tick
	for i := 1; i < failures && d < maxBackoff; i++ {
		d *= 2
	}
	return max(min(d, maxBackoff), tick)
}
