package target

// These tests send through the real SDK clients to the local stack's
// emulators: SQS and SNS on fauxqs, Kinesis on kinesalite, EventBridge on
// moto (read back through a rule that targets moto's SQS).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/awstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/envelopetest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
)

func newSender(t *testing.T, awsCfg aws.Config, arnOrURL string, cfg Config) *Sender {
	t.Helper()
	tgt, err := Parse(arnOrURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Target = tgt
	s, err := New(awsCfg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// events makes n messages whose bodies are envelopes of sequences from
// first on, in groups (empty: none).
func events(t *testing.T, first int64, n int, group func(seq int64) string) []Message {
	t.Helper()
	msgs := make([]Message, n)
	for i := range msgs {
		seq := first + int64(i)
		body, err := Envelope(Event{Sequence: seq, Topic: "orders.created", RecordedAt: time.Now(),
			Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, seq))})
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = Message{ID: fmt.Sprint(seq), Body: body, Group: group(seq), DedupID: DedupID("outbox", seq), Type: "orders.created"}
	}
	return msgs
}

func noGroup(int64) string { return "" }

func requireAllSent(t *testing.T, res Result) {
	t.Helper()
	for _, o := range res.Outcomes {
		if o.Status != Sent {
			t.Fatalf("message %s: %v %s %s, want sent", o.ID, o.Status, o.Code, o.Message)
		}
	}
}

// sendAll sends msgs through s, requires every one sent, and checks that
// it took calls calls (why says why that many).
func sendAll(t *testing.T, s *Sender, msgs []Message, calls int, why string) Result {
	t.Helper()
	res := s.Send(context.Background(), msgs)
	requireAllSent(t, res)
	if res.Calls != calls {
		t.Errorf("Calls = %d, want %d (%s)", res.Calls, calls, why)
	}
	return res
}

// wantBigRefused sends a message of size bytes between two small ones,
// in groups (a partition key each, for Kinesis), and checks that the big
// one alone failed, permanent with code.
func wantBigRefused(t *testing.T, s *Sender, groups []string, size int, code string) Result {
	t.Helper()
	res := s.Send(context.Background(), []Message{
		{ID: "small1", Group: groups[0], Body: []byte(`{}`)},
		{ID: "big", Group: groups[1], Body: bytes.Repeat([]byte("b"), size)},
		{ID: "small2", Group: groups[2], Body: []byte(`{}`)},
	})
	want := map[string]Status{"small1": Sent, "big": Permanent, "small2": Sent}
	for _, o := range res.Outcomes {
		if o.Status != want[o.ID] {
			t.Errorf("%s: %v %s %s, want %v", o.ID, o.Status, o.Code, o.Message, want[o.ID])
		}
	}
	if res.Outcomes[1].Code != code {
		t.Errorf("big's code %q, want %s", res.Outcomes[1].Code, code)
	}
	return res
}

// filled is n messages in group of size bytes each, each of its own byte.
func filled(n int, group string, size int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = Message{ID: fmt.Sprint(i), Group: group, Body: bytes.Repeat([]byte{'a' + byte(i)}, size)}
	}
	return msgs
}
func sequences(t *testing.T, bodies []string) []int64 {
	t.Helper()
	var out []int64
	for _, b := range bodies {
		out = append(out, envelopetest.Parse(t, b).Sequence)
	}
	return out
}

func bodies(ms []types.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, aws.ToString(m.Body))
	}
	return out
}

// inOrderPerGroup checks each group's sequences arrived ascending and
// returns how many of each group arrived.
func inOrderPerGroup(t *testing.T, ms []types.Message) map[string]int {
	t.Helper()
	last, count := map[string]int64{}, map[string]int{}
	for _, m := range ms {
		g := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		seq := sequences(t, []string{aws.ToString(m.Body)})[0]
		if seq <= last[g] {
			t.Errorf("group %s: sequence %d arrived after %d", g, seq, last[g])
		}
		last[g] = seq
		count[g]++
	}
	return count
}

// ------------------------------------------------------------------- SQS

func TestSQSStandardQueueReceivesEveryEnvelopeInCallsOfTen(t *testing.T) {
	t.Parallel()
	q := sqstest.Client(t)
	url := sqstest.NewQueue(t, q, "target-std", nil)
	s := newSender(t, awstest.Config(t), sqstest.QueueARN(t, q, url), Config{})
	sendAll(t, s, events(t, 1, 25, noGroup), 3, "for 25 messages")
	got := sequences(t, bodies(sqstest.Drain(t, q, url, 25, 10*time.Second)))
	if len(got) != 25 {
		t.Fatalf("queue received %d messages, want 25", len(got))
	}
	seen := map[int64]bool{}
	for _, s := range got {
		seen[s] = true
	}
	if len(seen) != 25 {
		t.Errorf("queue received %d distinct sequences, want 25", len(seen))
	}
}

func TestSQSFIFOQueueKeepsEachGroupsOrder(t *testing.T) {
	t.Parallel()
	q := sqstest.Client(t)
	url := sqstest.NewQueue(t, q, "target-fifo", map[string]string{"FifoQueue": "true"})
	s := newSender(t, awstest.Config(t), url, Config{Concurrency: 4})
	group := func(seq int64) string { return fmt.Sprintf("g%d", seq%3) }
	res := s.Send(context.Background(), events(t, 1, 45, group))
	requireAllSent(t, res)
	count := inOrderPerGroup(t, sqstest.Drain(t, q, url, 45, 10*time.Second))
	for _, g := range []string{"g0", "g1", "g2"} {
		if count[g] != 15 {
			t.Errorf("group %s: %d messages arrived, want 15", g, count[g])
		}
	}
}

func TestSQSFIFOResendWithTheSameDedupIDsIsNotDeliveredAgain(t *testing.T) {
	t.Parallel()
	q := sqstest.Client(t)
	url := sqstest.NewQueue(t, q, "target-dedup", map[string]string{"FifoQueue": "true"})
	s := newSender(t, awstest.Config(t), url, Config{})
	msgs := events(t, 100, 12, func(int64) string { return "g" })
	requireAllSent(t, s.Send(context.Background(), msgs))
	if got := len(sqstest.Drain(t, q, url, 12, 10*time.Second)); got != 12 {
		t.Fatalf("first send: %d arrived, want 12", got)
	}
	res := s.Send(context.Background(), msgs)
	requireAllSent(t, res)
	if got := sqstest.Drain(t, q, url, 1, 2*time.Second); len(got) != 0 {
		t.Errorf("resend: %d messages arrived again, want none (same dedup ids)", len(got))
	}
}

func TestSQSCallFillsTheOneMiBBatchLimitExactly(t *testing.T) {
	t.Parallel()
	q := sqstest.Client(t)
	url := sqstest.NewQueue(t, q, "target-size", nil)
	s := newSender(t, awstest.Config(t), url, Config{Concurrency: 1})
	// Five quarter-MiB bodies: four fill one call to exactly 1 MiB (fauxqs,
	// like SQS, refuses a byte more with BatchRequestTooLong), one is left.
	sendAll(t, s, filled(5, "", 256<<10), 2, "4 × 256 KiB, then 1")
	if got := len(sqstest.Drain(t, q, url, 5, 10*time.Second)); got != 5 {
		t.Errorf("%d arrived, want 5", got)
	}
}

func TestSQSMessageOverTheLimitIsPermanentWithoutACall(t *testing.T) {
	t.Parallel()
	q := sqstest.Client(t)
	url := sqstest.NewQueue(t, q, "target-big", nil)
	s := newSender(t, awstest.Config(t), url, Config{})
	res := s.Send(context.Background(), []Message{{ID: "big", Body: bytes.Repeat([]byte("x"), 1<<20+1)}})
	if o := res.Outcomes[0]; o.Status != Permanent || o.Code != CodeTooLarge {
		t.Errorf("outcome %+v, want permanent %s", o, CodeTooLarge)
	}
	if res.Calls != 0 {
		t.Errorf("Calls = %d, want 0", res.Calls)
	}
}

// SQS refuses a body with a character outside its allowed set (U+0000
// here) per entry, InvalidMessageContents; fauxqs does the same.
func TestSQSInvalidCharacterFailsThatEntryPermanentAndHoldsItsGroup(t *testing.T) {
	t.Parallel()
	q := sqstest.Client(t)
	url := sqstest.NewQueue(t, q, "target-bad", map[string]string{"FifoQueue": "true"})
	s := newSender(t, awstest.Config(t), url, Config{Limits: Limits{Entries: 2}, Concurrency: 1})
	msgs := events(t, 1, 5, func(seq int64) string { return map[bool]string{true: "a", false: "b"}[seq <= 3] })
	// Calls of two: [1a, 2a!], then [4b, 5b]: 2 is refused, so 3 (its
	// group, a later call) is held, while group b goes on.
	msgs[1].Body = []byte("{\"bad\":\"\x00\"}")
	res := s.Send(context.Background(), msgs)
	want := []Status{Sent, Permanent, Held, Sent, Sent}
	for i, w := range want {
		if res.Outcomes[i].Status != w {
			t.Errorf("message %s: %v (%s %s), want %v", res.Outcomes[i].ID, res.Outcomes[i].Status, res.Outcomes[i].Code, res.Outcomes[i].Message, w)
		}
	}
	if res.Outcomes[1].Code != "InvalidMessageContents" {
		t.Errorf("refused message's code %q, want InvalidMessageContents", res.Outcomes[1].Code)
	}
	if res.Outcomes[2].Behind != "2" {
		t.Errorf("held message is behind %q, want 2", res.Outcomes[2].Behind)
	}
	if res.Sent != 3 || res.Permanent != 1 || res.Held != 1 {
		t.Errorf("counts sent=%d permanent=%d held=%d, want 3, 1, 1", res.Sent, res.Permanent, res.Held)
	}
	if got := sequences(t, bodies(sqstest.Drain(t, q, url, 3, 10*time.Second))); len(got) != 3 {
		t.Errorf("queue received %v, want 1, 4, 5", got)
	}
}

// ------------------------------------------------------------------- SNS

func TestSNSFIFOTopicFansOutToAFIFOQueueInOrderAndOnce(t *testing.T) {
	t.Parallel()
	awsCfg := awstest.Config(t)
	sn, q := awstest.SNS(t), sqstest.Client(t)
	topic := awstest.NewTopic(t, sn, "target-topic", true)
	url := sqstest.NewQueue(t, q, "target-fanout", map[string]string{"FifoQueue": "true"})
	awstest.SubscribeQueue(t, sn, topic, sqstest.QueueARN(t, q, url))
	// Full calls of ten: the SDK writes PublishBatch's query keys sorted as
	// text (member.1, member.10, member.2, ...), and fauxqs 2.4.1 published
	// the entries in that order until infra/stack/patch-fauxqs.mjs made it
	// publish them by member number, as AWS does.
	s := newSender(t, awsCfg, topic, Config{})
	if s.Limits().Entries != 10 {
		t.Fatalf("SNS calls of %d entries, want the API's 10", s.Limits().Entries)
	}
	group := func(seq int64) string { return fmt.Sprintf("g%d", seq%2) }
	msgs := events(t, 1, 24, group)
	requireAllSent(t, s.Send(context.Background(), msgs))
	count := inOrderPerGroup(t, sqstest.Drain(t, q, url, 24, 10*time.Second))
	if count["g0"] != 12 || count["g1"] != 12 {
		t.Errorf("arrived per group %v, want 12 each", count)
	}
	requireAllSent(t, s.Send(context.Background(), msgs))
	if got := sqstest.Drain(t, q, url, 1, 2*time.Second); len(got) != 0 {
		t.Errorf("resend: %d messages arrived again, want none (same dedup ids)", len(got))
	}
}

func TestSNSStandardTopicFansOutEveryMessage(t *testing.T) {
	t.Parallel()
	sn, q := awstest.SNS(t), sqstest.Client(t)
	topic := awstest.NewTopic(t, sn, "target-topic", false)
	url := sqstest.NewQueue(t, q, "target-fanout", nil)
	awstest.SubscribeQueue(t, sn, topic, sqstest.QueueARN(t, q, url))
	s := newSender(t, awstest.Config(t), topic, Config{})
	requireAllSent(t, s.Send(context.Background(), events(t, 1, 15, noGroup)))
	if got := len(sqstest.Drain(t, q, url, 15, 10*time.Second)); got != 15 {
		t.Errorf("%d arrived, want 15", got)
	}
}

func TestSNSCallStaysWithin256KiB(t *testing.T) {
	t.Parallel()
	sn := awstest.SNS(t)
	topic := awstest.NewTopic(t, sn, "target-size", false)
	s := newSender(t, awstest.Config(t), topic, Config{Concurrency: 1})
	sendAll(t, s, filled(5, "", 100<<10), 3, "2 × 100 KiB per 256 KiB call")
}

// A topic's MaximumMessageSize can be raised to 1 MiB; a sender configured
// for that against a topic left at 256 KiB (fauxqs's only size) gets the
// per-entry refusal SNS gives.
func TestSNSMessageOverTheTopicsSizeFailsThatEntryPermanent(t *testing.T) {
	t.Parallel()
	sn := awstest.SNS(t)
	topic := awstest.NewTopic(t, sn, "target-big", false)
	s := newSender(t, awstest.Config(t), topic, Config{Limits: Limits{EntryBytes: 1 << 20}})
	res := wantBigRefused(t, s, []string{"", "", ""}, 300<<10, "InvalidParameter")
	if res.Calls != 1 {
		t.Errorf("Calls = %d, want 1 (a per-entry refusal needs no retry)", res.Calls)
	}
}

// ----------------------------------------------------------- EventBridge

func TestEventBridgeBusDeliversEnvelopesAsDetailThroughARule(t *testing.T) {
	t.Parallel()
	bus := awstest.NewBusToQueue(t, "outboxkeeper.test")
	s := newSender(t, awstest.Config(t), bus.ARN, Config{Source: bus.Source})
	sendAll(t, s, events(t, 1, 12, noGroup), 2, "for 12 entries")
	got := sqstest.Drain(t, bus.SQS, bus.Queue, 12, 10*time.Second)
	if len(got) != 12 {
		t.Fatalf("rule delivered %d events, want 12", len(got))
	}
	var ev struct {
		Source     string                `json:"source"`
		DetailType string                `json:"detail-type"`
		Detail     envelopetest.Envelope `json:"detail"`
	}
	if err := json.Unmarshal([]byte(aws.ToString(got[0].Body)), &ev); err != nil {
		t.Fatalf("delivered event is not JSON: %v", err)
	}
	if ev.Source != "outboxkeeper.test" {
		t.Errorf("source %q, want outboxkeeper.test", ev.Source)
	}
	if ev.DetailType != "orders.created" {
		t.Errorf("detail-type %q, want the topic orders.created", ev.DetailType)
	}
	if ev.Detail.Topic != "orders.created" || ev.Detail.Sequence < 1 || ev.Detail.Sequence > 12 {
		t.Errorf("detail %+v, want one of the envelopes sent", ev.Detail)
	}
}

func TestEventBridgeCallStaysWithin256KiBByAWSsFormula(t *testing.T) {
	t.Parallel()
	bus := awstest.NewBusToQueue(t, "outboxkeeper.size")
	s := newSender(t, awstest.Config(t), bus.ARN, Config{Source: bus.Source, Concurrency: 1})
	// Each entry is source + detail-type + detail = 128 KiB exactly, so two
	// fill a call: three entries need two calls.
	detail := 128<<10 - len(bus.Source) - len("t")
	var msgs []Message
	for i := range 3 {
		msgs = append(msgs, Message{ID: fmt.Sprint(i), Type: "t", Body: []byte(`{"x":"` + strings.Repeat("e", detail-8) + `"}`)})
	}
	if n := s.Size(msgs[0]); n != 128<<10 {
		t.Fatalf("Size = %d, want 131072", n)
	}
	sendAll(t, s, msgs, 2, "two entries a call")
}

// moto, like EventBridge, refuses per entry a Detail that is not JSON.
func TestEventBridgeMalformedDetailFailsThatEntryPermanent(t *testing.T) {
	t.Parallel()
	bus := awstest.NewBusToQueue(t, "outboxkeeper.bad")
	s := newSender(t, awstest.Config(t), bus.ARN, Config{Source: bus.Source})
	msgs := events(t, 1, 3, noGroup)
	msgs[1].Body = []byte(`{"not json`)
	res := s.Send(context.Background(), msgs)
	want := []Status{Sent, Permanent, Sent}
	for i, w := range want {
		if res.Outcomes[i].Status != w {
			t.Errorf("message %s: %v %s, want %v", res.Outcomes[i].ID, res.Outcomes[i].Status, res.Outcomes[i].Code, w)
		}
	}
	if res.Outcomes[1].Code != "MalformedDetail" {
		t.Errorf("code %q, want MalformedDetail", res.Outcomes[1].Code)
	}
	if got := len(sqstest.Drain(t, bus.SQS, bus.Queue, 2, 10*time.Second)); got != 2 {
		t.Errorf("rule delivered %d, want 2", got)
	}
}

func TestEventBridgeSenderNeedsASource(t *testing.T) {
	tgt, err := Parse("arn:aws:events:us-east-1:123456789012:event-bus/b")
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{"", "aws.orders"} {
		if _, err := New(aws.Config{}, Config{Target: tgt, Source: src}); err == nil || !strings.Contains(err.Error(), "Source") {
			t.Errorf("Source %q: error %v, want one naming Source", src, err)
		}
	}
}

// --------------------------------------------------------------- Kinesis

func TestKinesisStreamKeepsEachPartitionKeysOrder(t *testing.T) {
	t.Parallel()
	k := awstest.Kinesis(t)
	arn := awstest.NewStream(t, k, "target-stream", 2)
	s := newSender(t, awstest.Config(t), arn, Config{})
	msgs := events(t, 1, 600, func(seq int64) string { return fmt.Sprintf("key%d", seq%3) })
	sendAll(t, s, msgs, 2, "600 records, 500 a call")
	tgt, _ := Parse(arn)
	recs := awstest.ReadStream(t, k, tgt.Name, 600, 10*time.Second)
	if len(recs) != 600 {
		t.Fatalf("stream has %d records, want 600", len(recs))
	}
	last := map[string]int64{}
	for _, r := range recs {
		key := aws.ToString(r.PartitionKey)
		seq := sequences(t, []string{string(r.Data)})[0]
		if seq <= last[key] {
			t.Errorf("key %s: sequence %d after %d", key, seq, last[key])
		}
		last[key] = seq
	}
}

func TestKinesisCallFillsFiveMiBExactly(t *testing.T) {
	t.Parallel()
	k := awstest.Kinesis(t)
	arn := awstest.NewStream(t, k, "target-5mib", 1)
	s := newSender(t, awstest.Config(t), arn, Config{})
	// Six records of exactly 1 MiB with their key: five fill a call.
	sendAll(t, s, filled(6, "k", 1<<20-1), 2, "5 × 1 MiB, then 1")
}

// kinesalite refuses a call with a record over 1 MiB as a whole
// (ValidationException), as AWS does for a stream not configured for larger
// records. The Sender cannot tell which record, so it sends each alone: the
// big one fails permanent, the others arrive.
func TestKinesisRecordOverTheStreamsLimitFailsAloneAfterTheCallIsSplit(t *testing.T) {
	t.Parallel()
	k := awstest.Kinesis(t)
	arn := awstest.NewStream(t, k, "target-big", 1)
	s := newSender(t, awstest.Config(t), arn, Config{Limits: Limits{EntryBytes: 2 << 20}})
	res := wantBigRefused(t, s, []string{"a", "b", "c"}, 3<<19, "ValidationException")
	if res.Calls != 4 {
		t.Errorf("Calls = %d, want 4 (the call, then each alone)", res.Calls)
	}
	tgt, _ := Parse(arn)
	if got := len(awstest.ReadStream(t, k, tgt.Name, 2, 5*time.Second)); got != 2 {
		t.Errorf("stream has %d records, want 2", got)
	}
}

// ------------------------------------------------- transport and deadline

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestRefusedConnectionIsTransientAndHoldsTheGroup(t *testing.T) {
	t.Parallel()
	awsCfg := awstest.Config(t)
	awsCfg.BaseEndpoint = aws.String("http://" + closedPort(t))
	awsCfg.ConfigSources = nil // no per-service override: every client goes to the closed port
	awsCfg.RetryMaxAttempts = 1
	s := newSender(t, awsCfg, "arn:aws:sqs:us-east-1:000000000000:nowhere.fifo", Config{Limits: Limits{Entries: 2}, Concurrency: 1})
	res := s.Send(context.Background(), events(t, 1, 4, func(int64) string { return "g" }))
	want := []Status{Transient, Transient, Held, Held}
	for i, w := range want {
		if res.Outcomes[i].Status != w {
			t.Errorf("message %s: %v %s, want %v", res.Outcomes[i].ID, res.Outcomes[i].Status, res.Outcomes[i].Code, w)
		}
	}
	if res.Outcomes[0].Code != CodeRequestError {
		t.Errorf("code %q (%s), want %s", res.Outcomes[0].Code, res.Outcomes[0].Message, CodeRequestError)
	}
	if res.Calls != 1 {
		t.Errorf("Calls = %d, want 1: nothing of the group is sent after its failure", res.Calls)
	}
}

func TestCallThatOutlivesItsDeadlineEndsAtTheDeadline(t *testing.T) {
	t.Parallel()
	// A listener that accepts and never answers: the call can only end by
	// its ctx.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 100)
	t.Cleanup(func() {
		l.Close()
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case conns <- c:
			default:
				c.Close()
			}
		}
	}()
	for _, arn := range []string{
		"arn:aws:sqs:us-east-1:000000000000:silent",
		"arn:aws:sns:us-east-1:000000000000:silent",
		"arn:aws:events:us-east-1:000000000000:event-bus/silent",
		"arn:aws:kinesis:us-east-1:000000000000:stream/silent",
	} {
		t.Run(arn, func(t *testing.T) {
			awsCfg := awstest.Config(t)
			awsCfg.BaseEndpoint = aws.String("http://" + l.Addr().String())
			awsCfg.ConfigSources = nil
			s := newSender(t, awsCfg, arn, Config{Source: "outboxkeeper.test"})
			const budget = 300 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			start := time.Now()
			done := make(chan Result, 1)
			go func() { done <- s.Send(ctx, events(t, 1, 3, func(int64) string { return "g" })) }()
			var res Result
			// Generous for a loaded machine; a call not bounded by the ctx
			// would wait forever.
			select {
			case res = <-done:
			case <-time.After(budget + 3*time.Second):
				t.Fatalf("Send still running %v after its %v deadline", time.Since(start), budget)
			}
			if o := res.Outcomes[0]; o.Status != Transient || o.Code != CodeDeadlineExceeded {
				t.Errorf("outcome %+v, want transient %s", o, CodeDeadlineExceeded)
			}
			if o := res.Outcomes[2]; o.Status != Transient && o.Status != Held {
				t.Errorf("last message %+v, want not sent", o)
			}
		})
	}
}
