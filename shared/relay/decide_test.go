package relay

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/shared/target"
)

func TestTopicPatternsMatchWithStarAsAnyRun(t *testing.T) {
	matches(t, ParseTopics, []matchCase{
		{"*", "orders.created", true},
		{"*", "", true},
		{"orders.*", "orders.created", true},
		{"orders.*", "orders.", true},
		{"orders.*", "orders", false},
		{"orders.*", "billing.orders.created", false},
		{"*.created", "orders.created", true},
		{"*.created", "orders.created.v2", false},
		{"billing.invoice.*", "billing.invoice.paid", true},
		{"billing.invoice.*", "billing.invoices.paid", false},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"a*b*c", "abcbc", true},
		{"orders.created", "orders.created", true},
		{"orders.created", "orders.createdX", false},
		{"orders.*,billing.*", "billing.paid", true},
		{"orders.*, billing.* ", "billing.paid", true},
		{"orders.*,billing.*", "shipping.sent", false},
		{"**", "x", true},
		{"é*", "été", true},
	})
}

// matchCase is a list as its variable takes it, a value, and whether the
// value is one of the list's.
type matchCase struct {
	list, value string
	want        bool
}

// matches parses each case's list and matches its value, a subtest a case.
func matches[M interface{ Match(string) bool }](t *testing.T, parse func(string) (M, error), cases []matchCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.list+"~"+c.value, func(t *testing.T) {
			m, err := parse(c.list)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Match(c.value); got != c.want {
				t.Errorf("Match(%q) = %v, want %v", c.value, got, c.want)
			}
		})
	}
}

// refused checks that parse refuses each list, a subtest a list.
func refused[M any](t *testing.T, name string, parse func(string) (M, error), lists ...string) {
	t.Helper()
	for _, bad := range lists {
		t.Run(fmt.Sprintf("%q", bad), func(t *testing.T) {
			if _, err := parse(bad); err == nil {
				t.Errorf("%s(%q) accepted", name, bad)
			}
		})
	}
}

// A long topic against many stars stays fast: the match backtracks only to
// the last star.
func TestTopicMatchIsNotExponential(t *testing.T) {
	tp, err := ParseTopics(strings.Repeat("a*", 30) + "b")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if tp.Match(strings.Repeat("a", 5000)) {
		t.Error("matched a topic without the final b")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("match took %s", d)
	}
}

func TestTopicPatternThatCannotMatchIsRefused(t *testing.T) {
	refused(t, "ParseTopics", ParseTopics, "", " ", "orders.*,", ",orders.*", "orders.*,,billing.*", "a\x00b", "\xff*")
}

func TestGroupOfAnEvent(t *testing.T) {
	ev := func(headers string) event {
		return event{Sequence: 42, Topic: "orders.created", Headers: json.RawMessage(headers)}
	}
	cases := []struct {
		name    string
		groupBy string
		kind    target.Kind
		e       event
		want    string
	}{
		{"topic", "topic", target.SQS, ev(`{}`), "orders.created"},
		{"default is topic", "", target.SQS, ev(`{}`), "orders.created"},
		{"header string", "tenant", target.SQS, ev(`{"tenant":"t1"}`), "t1"},
		{"header number as its text", "tenant", target.SQS, ev(`{"tenant":7}`), "7"},
		{"header missing falls back to the topic", "tenant", target.SQS, ev(`{"other":"x"}`), "orders.created"},
		{"header null falls back to the topic", "tenant", target.SQS, ev(`{"tenant":null}`), "orders.created"},
		{"no headers falls back to the topic", "tenant", target.SQS, ev(``), "orders.created"},
		{"none on a queue", "none", target.SQS, ev(`{}`), ""},
		{"none on EventBridge", "none", target.EventBridge, ev(`{}`), ""},
		{"none on Kinesis is the sequence", "none", target.Kinesis, ev(`{}`), "42"},
		{"aggregate_id", "aggregate_id", target.SQS, withAggregate(ev(`{"aggregate_id":"h"}`), "order", "o-7"), "o-7"},
		{"no aggregate_id falls back to the topic", "aggregate_id", target.SQS, withAggregate(ev(`{}`), "order", ""), "orders.created"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := ParseGroupBy(c.groupBy)
			if err != nil {
				t.Fatal(err)
			}
			if got := g.of(c.e, c.kind); got != c.want {
				t.Errorf("group %q, want %q", got, c.want)
			}
		})
	}
}

func withAggregate(e event, typ, id string) event {
	e.AggregateType, e.AggregateID = typ, id
	return e
}

func TestAggregateTypesMatchListedNamesExactly(t *testing.T) {
	matches(t, ParseAggregateTypes, []matchCase{
		{"", "order", true},
		{"", "", true},
		{" ", "", true},
		{"order", "order", true},
		{"order", "orders", false},
		{"order", "", false},
		{"order, invoice ", "invoice", true},
		{"order,invoice", "shipment", false},
		{"ord*", "order", false},
	})
}

func TestAggregateTypeListThatCannotMatchIsRefused(t *testing.T) {
	refused(t, "ParseAggregateTypes", ParseAggregateTypes, "order,", ",order", "order,,invoice", "order, ,invoice", "a\x00b", "\xff")
}

// A refused list says why in words naming the entry and the column it
// can never match.
func TestListRefusalsNameTheEntry(t *testing.T) {
	topics := func(s string) error { _, err := ParseTopics(s); return err }
	types := func(s string) error { _, err := ParseAggregateTypes(s); return err }
	cases := []struct {
		name  string
		parse func(string) error
		list  string
		want  string
	}{
		{"topics, a stray comma", topics, "orders.*,", "an empty pattern (a stray comma?) matches no topic: want comma-separated patterns such as orders.*,billing.invoice.*"},
		{"topics, a NUL", topics, "a\x00b", `pattern "a\x00b" holds a NUL, which no topic can hold`},
		{"topics, not UTF-8", topics, "\xff*", `pattern "\xff*" is not UTF-8, which every topic is`},
		{"aggregate types, a stray comma", types, "order, ,invoice", "an empty aggregate type (a stray comma?) matches no event: want comma-separated names such as order,invoice, or nothing for all"},
		{"aggregate types, a NUL", types, "a\x00b", `aggregate type "a\x00b" holds a NUL, which no aggregate_type can hold`},
		{"aggregate types, not UTF-8", types, "\xff", `aggregate type "\xff" is not UTF-8, which every aggregate_type is`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.parse(c.list)
			if err == nil {
				t.Fatalf("%q accepted", c.list)
			}
			if err.Error() != c.want {
				t.Errorf("%q: %q, want %q", c.list, err.Error(), c.want)
			}
		})
	}
}

// entries builds pending entries with the given groups, sequences from 1.
func entries(groups ...string) []entry {
	out := make([]entry, len(groups))
	for i, g := range groups {
		seq := int64(i + 1)
		out[i] = entry{seq: seq, msg: target.Message{ID: fmt.Sprint(seq), Group: g}}
	}
	return out
}

func states(es []entry) string {
	var b strings.Builder
	for _, e := range es {
		b.WriteByte("PSKX"[e.state])
	}
	return b.String()
}

func outcomes(statuses ...target.Status) []target.Outcome {
	out := make([]target.Outcome, len(statuses))
	for i, s := range statuses {
		out[i] = target.Outcome{Status: s, Code: map[target.Status]string{target.Permanent: "InvalidMessageContents", target.Transient: "Throttling"}[s]}
	}
	return out
}

const (
	ok   = target.Sent
	perm = target.Permanent
	tran = target.Transient
	held = target.Held
)

// After a partial failure a group counts as sent only up to its first
// failed entry; an entry the target accepted after it (in the same call)
// goes again with it. Other groups are not held back.
func TestSettleCountsAGroupSentOnlyUpToItsFirstFailure(t *testing.T) {
	es := entries("a", "a", "a", "b", "b")
	idx := []int{0, 1, 2, 3, 4}
	refused, transient := settle(es, idx, outcomes(ok, perm, ok, ok, ok))
	if got := states(es); got != "SPPSS" {
		t.Errorf("states %s, want SPPSS (a: 1 sent, 2 refused, 3 accepted after it but pending)", got)
	}
	if len(refused) != 1 || refused[0].index != 1 {
		t.Errorf("refused %+v, want entry 2 only", refused)
	}
	if transient != 0 {
		t.Errorf("transient %d, want 0", transient)
	}
}

func TestSettleWithoutGroupsCountsEachMessageAlone(t *testing.T) {
	es := entries("", "", "")
	_, transient := settle(es, []int{0, 1, 2}, outcomes(tran, ok, ok))
	if got := states(es); got != "PSS" {
		t.Errorf("states %s, want PSS", got)
	}
	if transient != 1 {
		t.Errorf("transient %d, want 1", transient)
	}
}

func TestSettleHeldMessagesStayPending(t *testing.T) {
	es := entries("a", "a", "b")
	settle(es, []int{0, 1, 2}, outcomes(tran, held, ok))
	if got := states(es); got != "PPS" {
		t.Errorf("states %s, want PPS", got)
	}
}

func TestPositionAfterAPartialFailureStopsBeforeTheFirstUnresolved(t *testing.T) {
	cases := []struct {
		name   string
		states []state
		want   int64
	}{
		{"all sent", []state{sent, sent, sent}, 13},
		{"first pending", []state{pending, sent, sent}, 10},
		{"middle pending", []state{sent, pending, sent}, 11},
		{"skipped and parked pass", []state{skipped, parked, sent}, 13},
		{"skipped then pending", []state{skipped, pending, skipped}, 11},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			es := make([]entry, len(c.states))
			for i, s := range c.states {
				es[i] = entry{seq: int64(11 + i), state: s}
			}
			if got := advance(10, es); got != c.want {
				t.Errorf("advance = %d, want %d", got, c.want)
			}
		})
	}
}

// The position of a batch with a gap read_events passed over (pruned, at
// or below the watermark) moves to the last resolved entry's sequence.
func TestPositionFollowsTheSequencesRead(t *testing.T) {
	es := []entry{{seq: 20, state: sent}, {seq: 25, state: sent}, {seq: 26, state: pending}}
	if got := advance(10, es); got != 25 {
		t.Errorf("advance = %d, want 25", got)
	}
}

func TestWhatIsSentAgainIsWhatIsPendingInOrder(t *testing.T) {
	es := entries("a", "a", "b", "b")
	es[0].state, es[2].state = sent, parked
	idx, refused := toSend(es)
	if fmt.Sprint(idx) != "[1 3]" {
		t.Errorf("toSend %v, want [1 3]", idx)
	}
	if len(refused) != 0 {
		t.Errorf("refused %+v, want none", refused)
	}
}

// An event whose envelope cannot be built is refused without a send and
// holds the rest of its group back, as a target's refusal would.
func TestAnUnbuildableEnvelopeIsRefusedAndHoldsItsGroup(t *testing.T) {
	es := entries("a", "a", "b", "")
	es[0].bad = "payload is not valid JSON"
	idx, refused := toSend(es)
	if fmt.Sprint(idx) != "[2 3]" {
		t.Errorf("toSend %v, want [2 3] (group a held behind its refused first)", idx)
	}
	if len(refused) != 1 || refused[0].index != 0 || refused[0].code != CodeInvalidEnvelope {
		t.Errorf("refused %+v, want entry 1 as %s", refused, CodeInvalidEnvelope)
	}
}

func TestAttemptsParkAtTheLimitAndNeverWithNeverPark(t *testing.T) {
	cases := []struct {
		prior, max  int
		attempts    int
		park        bool
		description string
	}{
		{0, 5, 1, false, "first refusal of five"},
		{3, 5, 4, false, "fourth"},
		{4, 5, 5, true, "fifth parks"},
		{0, 1, 1, true, "a limit of one parks at once"},
		{99, NeverPark, 100, false, "never park"},
	}
	for _, c := range cases {
		t.Run(c.description, func(t *testing.T) {
			a, p := tryOutcome(c.prior, c.max)
			if a != c.attempts {
				t.Errorf("attempts %d, want %d", a, c.attempts)
			}
			if p != c.park {
				t.Errorf("park %v, want %v", p, c.park)
			}
		})
	}
}

func TestBackoffDoublesFromATickUpToItsCap(t *testing.T) {
	tick := 200 * time.Millisecond
	for failures, want := range map[int]time.Duration{
		0: tick, 1: tick, 2: 400 * time.Millisecond, 3: 800 * time.Millisecond, 5: 3200 * time.Millisecond, 6: maxBackoff, 40: maxBackoff,
	} {
		if got := backoff(tick, failures); got != want {
			t.Errorf("backoff after %d failures = %s, want %s", failures, got, want)
		}
	}
	if got := backoff(time.Minute, 3); got != time.Minute {
		t.Errorf("backoff with a tick above the cap = %s, want the tick", got)
	}
}

func TestErrorTextIsCutOnACharacterBoundary(t *testing.T) {
	long := strings.Repeat("é", maxErrorText)
	got := errorText("Code", long)
	if len(got) > maxErrorText {
		t.Errorf("%d bytes, want at most %d", len(got), maxErrorText)
	}
	if !strings.HasPrefix(got, "Code: é") || !json.Valid([]byte(fmt.Sprintf("%q", got))) {
		t.Errorf("cut badly: %q...", got[:20])
	}
	if s := got[len(got)-2:]; s != "é" {
		t.Errorf("ends with %q, want a whole é", s)
	}
}
