package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/awstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/envelopetest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/target"
)

// seeded is a stream with what a relay of orders.* must send and what it
// must pass over.
type seeded struct {
	// orders are the events of orders.* (tenant t1, then t2, interleaved
	// across topics), in sequence order.
	orders []int64
	// placeholder and billing are passed over, unsent.
	placeholder, billing int64
	head                 int64
}

// seed publishes orders.created for tenant t1, a gap the fill closed, a
// billing event, orders.shipped for tenant t2 and orders.created for t1
// again.
func seed(t *testing.T, db *testdb.DB) seeded {
	t.Helper()
	var s seeded
	s.orders = append(s.orders, publish(t, db, "orders.created", `{"tenant":"t1"}`, `{"id":1}`, `{"id":2}`)...)
	s.placeholder = db.BurnOne(t)
	db.Exec(t, `INSERT INTO outbox.events (sequence, filled_by) VALUES ($1, 'fill')`, s.placeholder)
	s.billing = publish(t, db, "billing.paid", "", `{"id":3}`)[0]
	s.orders = append(s.orders, publish(t, db, "orders.shipped", `{"tenant":"t2"}`, `{"id":4}`, `{"id":5}`)...)
	s.orders = append(s.orders, publish(t, db, "orders.created", `{"tenant":"t1"}`, `{"id":6}`)...)
	s.head = s.orders[len(s.orders)-1]
	return s
}

// relayed checks a bounded pass sent every orders event, passed over the
// placeholder and the billing event, and ended caught up.
func relayed(t *testing.T, r response, s seeded) {
	t.Helper()
	if r.Position != s.head || r.Lag != 0 {
		t.Errorf("position %d lag %d, want %d and 0", r.Position, r.Lag, s.head)
	}
	if r.Sent != int64(len(s.orders)) {
		t.Errorf("sent %d, want %d", r.Sent, len(s.orders))
	}
	if r.Skipped != 2 {
		t.Errorf("skipped %d, want 2 (the placeholder and billing.paid)", r.Skipped)
	}
	if r.WaitingFor() != "" || r.Error != "" {
		t.Errorf("waiting %q error %q, want neither", r.WaitingFor(), r.Error)
	}
}

// relayOrders runs one bounded pass of a relay of orders.* to target (env
// over that) and checks it relayed s.
func relayOrders(t *testing.T, db *testdb.DB, s seeded, target string, env map[string]string) {
	t.Helper()
	vars := map[string]string{"RELAY_TARGET": target, "RELAY_TOPICS": "orders.*"}
	maps.Copy(vars, env)
	relayed(t, invoke(t, relayFn(t, db, vars)), s)
}

// receivedOnceEach checks a queue that keeps no order (a standard one)
// received every orders event of s once, each as its envelope.
func receivedOnceEach(t *testing.T, db *testdb.DB, q *sqs.Client, url string, s seeded) {
	t.Helper()
	msgs := drain(t, q, url, len(s.orders), 10*time.Second)
	exactlyOnceInOrder(t, sortedBySequence(msgs), s.orders, byTopic)
	for _, m := range msgs {
		checkEnvelope(t, db, m.env)
	}
}

// checkEnvelope checks one body is the documented envelope of its event.
func checkEnvelope(t *testing.T, db *testdb.DB, e envelopetest.Envelope) {
	t.Helper()
	var topic, payload, headers, recordedAt string
	db.Pool.QueryRow(t.Context(), `SELECT topic, payload::text, headers::text,
		to_char(recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') FROM outbox.events WHERE sequence = $1`, e.Sequence).
		Scan(&topic, &payload, &headers, &recordedAt)
	if e.Topic != topic || string(e.Payload) != payload || string(e.Headers) != headers || e.RecordedAt != recordedAt {
		t.Errorf("envelope of %d is %+v, want topic %s payload %s headers %s recorded_at %s", e.Sequence, e, topic, payload, headers, recordedAt)
	}
}

// Each kind of target receives every event of the relay's topics once, in
// order within each group, as the documented envelope; placeholders and
// other topics are never sent, and the position passes them.
func TestEachTargetEndToEnd(t *testing.T) {
	t.Parallel()

	t.Run("SQS standard queue", func(t *testing.T) {
		t.Parallel()
		db, q := testdb.New(t), sqstest.Client(t)
		url := sqstest.NewQueue(t, q, "relay-std", nil)
		s := seed(t, db)
		relayOrders(t, db, s, url, nil)
		receivedOnceEach(t, db, q, url, s)
	})

	t.Run("SQS FIFO queue grouped by a header", func(t *testing.T) {
		t.Parallel()
		db, q := testdb.New(t), sqstest.Client(t)
		url := sqstest.NewQueue(t, q, "relay-fifo", map[string]string{"FifoQueue": "true"})
		s := seed(t, db)
		relayOrders(t, db, s, url, map[string]string{"RELAY_GROUP_BY": "tenant"})
		msgs := drain(t, q, url, len(s.orders), 10*time.Second)
		exactlyOnceInOrder(t, msgs, s.orders, func(m got) string { return m.group })
		for _, m := range msgs {
			var h struct{ Tenant string }
			_ = json.Unmarshal(m.env.Headers, &h)
			if m.group != h.Tenant {
				t.Errorf("sequence %d: MessageGroupId %q, want its tenant header %q", m.env.Sequence, m.group, h.Tenant)
			}
			if want := target.DedupID("outbox", m.env.Sequence); m.dedupID != want {
				t.Errorf("sequence %d: MessageDeduplicationId %q, want %q", m.env.Sequence, m.dedupID, want)
			}
		}
	})

	t.Run("SNS topic fanned out to a queue", func(t *testing.T) {
		t.Parallel()
		db, q, sn := testdb.New(t), sqstest.Client(t), awstest.SNS(t)
		topic := awstest.NewTopic(t, sn, "relay-topic", false)
		url := sqstest.NewQueue(t, q, "relay-fanout", nil)
		awstest.SubscribeQueue(t, sn, topic, sqstest.QueueARN(t, q, url))
		s := seed(t, db)
		relayOrders(t, db, s, topic, nil)
		receivedOnceEach(t, db, q, url, s)
	})

	t.Run("SNS FIFO topic fanned out to a FIFO queue", func(t *testing.T) {
		t.Parallel()
		db, q, sn := testdb.New(t), sqstest.Client(t), awstest.SNS(t)
		topic := awstest.NewTopic(t, sn, "relay-topic", true)
		url := sqstest.NewQueue(t, q, "relay-fanout", map[string]string{"FifoQueue": "true"})
		awstest.SubscribeQueue(t, sn, topic, sqstest.QueueARN(t, q, url))
		s := seed(t, db)
		// More than one call's worth of one group: the order holds across
		// calls and within full calls of ten.
		more := publish(t, db, "orders.created", `{"tenant":"t1"}`, payloads(25)...)
		s.orders, s.head = append(s.orders, more...), more[len(more)-1]
		relayOrders(t, db, s, topic, nil)
		msgs := drain(t, q, url, len(s.orders), 10*time.Second)
		exactlyOnceInOrder(t, msgs, s.orders, byTopic)
		for _, m := range msgs {
			if m.group != m.env.Topic {
				t.Errorf("sequence %d: MessageGroupId %q, want its topic", m.env.Sequence, m.group)
			}
		}
	})

	t.Run("Kinesis stream", func(t *testing.T) {
		t.Parallel()
		db, k := testdb.New(t), awstest.Kinesis(t)
		arn := awstest.NewStream(t, k, "relay-stream", 2)
		s := seed(t, db)
		relayOrders(t, db, s, arn, nil)
		var msgs []got
		for _, rec := range awstest.ReadStream(t, k, streamName(arn), len(s.orders), 10*time.Second) {
			m := got{env: envelopetest.Parse(t, string(rec.Data)), group: aws.ToString(rec.PartitionKey)}
			if m.group != m.env.Topic {
				t.Errorf("sequence %d: partition key %q, want its topic", m.env.Sequence, m.group)
			}
			checkEnvelope(t, db, m.env)
			msgs = append(msgs, m)
		}
		// Records are read shard by shard, each in its order; a partition
		// key lives in one shard.
		exactlyOnceInOrder(t, msgs, s.orders, byTopic)
	})

	t.Run("EventBridge bus through a rule to a queue", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		bus := awstest.NewBusToQueue(t, "outboxkeeper.outbox")
		s := seed(t, db)
		relayOrders(t, db, s, bus.ARN, nil)
		var msgs []got
		for _, m := range receive(t, bus.SQS, bus.Queue, len(s.orders), 15*time.Second) {
			var ev struct {
				Source     string          `json:"source"`
				DetailType string          `json:"detail-type"`
				Detail     json.RawMessage `json:"detail"`
			}
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &ev); err != nil {
				t.Fatalf("not an EventBridge event: %s", aws.ToString(m.Body))
			}
			e := envelopetest.Parse(t, string(ev.Detail))
			if ev.Source != "outboxkeeper.outbox" || ev.DetailType != e.Topic {
				t.Errorf("sequence %d: source %q detail-type %q, want outboxkeeper.outbox and %q", e.Sequence, ev.Source, ev.DetailType, e.Topic)
			}
			msgs = append(msgs, got{env: e})
		}
		exactlyOnceInOrder(t, sortedBySequence(msgs), s.orders, byTopic)
	})
}

// sortedBySequence orders what a target without order received, so
// exactlyOnceInOrder checks only "once".
func sortedBySequence(msgs []got) []got {
	out := append([]got(nil), msgs...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].env.Sequence < out[j-1].env.Sequence; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// Two relays of different names and topic patterns on one schema each
// send their own topics to their own target and keep their own position.
func TestTwoRelaysOnDifferentTopicPatterns(t *testing.T) {
	t.Parallel()
	db, q := testdb.New(t), sqstest.Client(t)
	ordersQ := sqstest.NewQueue(t, q, "relay-orders", map[string]string{"FifoQueue": "true"})
	billingQ := sqstest.NewQueue(t, q, "relay-billing", map[string]string{"FifoQueue": "true"})
	var orders, billing []int64
	for i := range 10 {
		orders = append(orders, publish(t, db, "orders.created", "", fmt.Sprintf(`{"o":%d}`, i))...)
		billing = append(billing, publish(t, db, "billing.invoice.paid", "", fmt.Sprintf(`{"b":%d}`, i))...)
	}
	publish(t, db, "shipping.sent", "", `{}`)
	o := relayFn(t, db, map[string]string{"RELAY_NAME": "orders", "RELAY_TARGET": ordersQ, "RELAY_TOPICS": "orders.*"})
	b := relayFn(t, db, map[string]string{"RELAY_NAME": "billing", "RELAY_TARGET": billingQ, "RELAY_TOPICS": "billing.invoice.*"})
	ro, rb := invoke(t, o), invoke(t, b)
	head := int64(21)
	for _, r := range []response{ro, rb} {
		if r.Position != head || r.Sent != 10 || r.Skipped != 11 {
			t.Errorf("relay %s: position %d sent %d skipped %d, want %d, 10, 11", r.Relay, r.Position, r.Sent, r.Skipped, head)
		}
	}
	exactlyOnceInOrder(t, drain(t, q, ordersQ, 10, 10*time.Second), orders, byTopic)
	exactlyOnceInOrder(t, drain(t, q, billingQ, 10, 10*time.Second), billing, byTopic)
	if p := position(t, db, "orders"); p != head {
		t.Errorf("relay:orders at %d, want %d", p, head)
	}
	if p := position(t, db, "billing"); p != head {
		t.Errorf("relay:billing at %d, want %d", p, head)
	}
	if n := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.leases WHERE name LIKE 'relay:%'`); n != 2 {
		t.Errorf("%d relay leases, want one each", n)
	}
}

// A bad configuration fails the init, naming the variable.
func TestBadConfigurationFailsInitNamingTheVariable(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for name, env := range map[string]map[string]string{
		"RELAY_TARGET":   {"RELAY_TARGET": "arn:aws:lambda:eu-west-1:123456789012:function:orders"},
		"RELAY_GROUP_BY": {"RELAY_TARGET": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo", "RELAY_GROUP_BY": "none"},
		"RELAY_TOPICS":   {"RELAY_TARGET": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders", "RELAY_TOPICS": "orders.*,"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn := relayFn(t, db, env)
			if _, err := fn.Invoke(t.Context(), schedule); err == nil {
				t.Fatalf("the invocation succeeded with %v", env)
			}
			if logs := fn.AwaitLogs(func(l string) bool { return strings.Contains(l, name) }); !strings.Contains(logs, name) {
				t.Errorf("the init error does not name %s:\n%s", name, logs)
			}
		})
	}
}
