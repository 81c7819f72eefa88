package relay

// The batch step on the real parts: PostgreSQL through read_events and
// commit_position, fauxqs's SQS through the target's SDK client. A per-entry
// refusal is the emulator's own: SQS refuses a body holding U+FFFF
// (InvalidMessageContents), which jsonb stores and returns as it is.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/awstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// badPayload is a payload SQS refuses in a message body.
const badPayload = `{"bad":"\uffff"}`

// newTestService is a relay on db's schema that logs and emits nowhere;
// the tests and the benchmarks build theirs here.
func newTestService(t testing.TB, db *testdb.DB, cfg Config) *Service {
	t.Helper()
	cfg.Schema = testdb.Schema
	s, err := New(db.Pool, cfg, Options{AWS: awstest.Config(t), Options: pass.Options{
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: &metrics.Emitter{Function: "relay", Out: io.Discard}}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// publish commits one event per payload on topic, headers as given.
func publish(t *testing.T, db *testdb.DB, topic, headers string, payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		var h any
		if headers != "" {
			h = headers
		}
		db.Exec(t, `SELECT outbox.publish($1, $2::jsonb, $3::jsonb)`, topic, p, h)
	}
}

// publishRouted commits one event on topic with its routing columns
// (empty = NULL).
func publishRouted(t *testing.T, db *testdb.DB, topic, aggregateType, aggregateID string) {
	t.Helper()
	db.Exec(t, `SELECT outbox.publish($1, '{}'::jsonb, aggregate_type => NULLIF($2, ''), aggregate_id => NULLIF($3, ''))`, topic, aggregateType, aggregateID)
}

// steps runs batch steps until the stream is idle or n steps ran, and
// returns the last.
func steps(t *testing.T, st *stream, q *testdb.DB, n int) step {
	t.Helper()
	var last step
	for range n {
		var err error
		last, err = st.step(context.Background(), q.Pool, time.Now().Add(20*time.Second))
		if err != nil {
			t.Fatalf("step: %v", err)
		}
		if last == idle {
			break
		}
	}
	return last
}

// oncePerGroupInOrder says got holds exactly want's sequences, once each,
// ascending within each group.
func oncePerGroupInOrder(got []received, want []int64) error {
	seen, last := map[int64]int{}, map[string]int64{}
	for _, r := range got {
		seen[r.seq]++
		if r.seq <= last[r.group] {
			return fmt.Errorf("group %q: %d after %d", r.group, r.seq, last[r.group])
		}
		last[r.group] = r.seq
	}
	for _, w := range want {
		if seen[w] != 1 {
			return fmt.Errorf("sequence %d arrived %d times", w, seen[w])
		}
		delete(seen, w)
	}
	if len(seen) > 0 {
		return fmt.Errorf("unexpected sequences %v", seen)
	}
	return nil
}

type received struct {
	seq   int64
	group string
}

// drain receives until want messages arrived, or wait passed.
func drain(t *testing.T, url string, want int, wait ...time.Duration) []received {
	t.Helper()
	timeout := 10 * time.Second
	if len(wait) > 0 {
		timeout = wait[0]
	}
	var out []received
	for _, m := range sqstest.Drain(t, sqstest.Client(t), url, want, timeout) {
		var e struct {
			Sequence int64 `json:"sequence"`
		}
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &e); err != nil {
			t.Fatalf("body %q: %v", aws.ToString(m.Body), err)
		}
		out = append(out, received{e.Sequence, m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]})
	}
	return out
}

// A refused event holds its group, not the others; the position stops
// before it; it is tried again at each step, parked at its last attempt,
// and the rest of its group follows in order.
func TestBatchStepKeepsGroupOrderAcrossARefusalAndParks(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := sqstest.NewQueue(t, sqstest.Client(t), "relay-step", map[string]string{"FifoQueue": "true"})
	s := newTestService(t, db, Config{Target: url, MaxAttempts: 3})
	publish(t, db, "a", "", `{"n":1}`, badPayload, `{"n":3}`)
	publish(t, db, "b", "", `{"n":4}`, `{"n":5}`)

	res := &Result{}
	st := newStream(s, res)
	if got := steps(t, st, db, 1); got != failed {
		t.Fatalf("first step %v, want failed", got)
	}
	if st.position != 1 {
		t.Errorf("position after the refusal %d, want 1 (event 2 refused)", st.position)
	}
	// One call carried all five: SQS refused 2 and took the rest, 3 of
	// group a included (a target may accept a group's later entries after
	// a refused one). 3 is not counted sent: it goes again after 2, and the
	// FIFO queue drops the repeat by its dedup id.
	got := drain(t, url, 4)
	if n := testdb.Scalar[int](t, db.Pool, `SELECT attempts FROM outbox.relay_parked WHERE relay = 'default' AND sequence = 2`); n != 1 {
		t.Errorf("attempts after one refusal %d, want 1", n)
	}
	// Two more tries: the third parks it, then 3 goes.
	steps(t, st, db, 5)
	if st.position != 5 {
		t.Errorf("position %d, want 5 (2 parked, 3 sent)", st.position)
	}
	got = append(got, drain(t, url, 1, 2*time.Second)...)
	if err := oncePerGroupInOrder(got, []int64{1, 3, 4, 5}); err != nil {
		t.Errorf("the queue received %v: %v", got, err)
	}
	if res.Parked != 1 || res.Refused != 3 {
		t.Errorf("parked %d refused %d, want 1 and 3", res.Parked, res.Refused)
	}
	if res.Sent != 4 {
		t.Errorf("sent %d, want 4 (1, 3, 4, 5 once each)", res.Sent)
	}
	var attempts int
	var parkedAt *time.Time
	if err := db.Pool.QueryRow(context.Background(), `SELECT attempts, parked_at FROM outbox.relay_parked WHERE sequence = 2`).Scan(&attempts, &parkedAt); err != nil {
		t.Fatal(err)
	}
	if attempts != 3 || parkedAt == nil {
		t.Errorf("row of 2: attempts %d parked_at %v, want 3 and set", attempts, parkedAt)
	}
	if pos := testdb.Scalar[int64](t, db.Pool, `SELECT position FROM outbox.consumers WHERE name = 'relay:default'`); pos != 5 {
		t.Errorf("committed position %d, want 5", pos)
	}
}

// With NeverPark the stream stops at the refused event: the position stays
// before it whatever the number of tries, and later events wait.
func TestBatchStepWithNeverParkStopsAtTheEvent(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := sqstest.NewQueue(t, sqstest.Client(t), "relay-stop", nil)
	s := newTestService(t, db, Config{Target: url, MaxAttempts: NeverPark, GroupBy: "none"})
	publish(t, db, "a", "", `{"n":1}`, badPayload, `{"n":3}`)
	res := &Result{}
	st := newStream(s, res)
	steps(t, st, db, 8)
	if st.position != 1 {
		t.Errorf("position %d, want 1", st.position)
	}
	seq, refused, ok := st.stoppedAt()
	if !ok || seq != 2 || !refused {
		t.Errorf("stopped at %d (refused %v, %v), want 2 refused", seq, refused, ok)
	}
	if n := testdb.Scalar[int](t, db.Pool, `SELECT attempts FROM outbox.relay_parked WHERE sequence = 2 AND parked_at IS NULL`); n != 8 {
		t.Errorf("attempts %d, want 8, unparked", n)
	}
	// 3 is in no group: the target took it at the first step, and it is not
	// sent again while 2 is retried.
	if got := drain(t, url, 2); len(got) != 2 {
		t.Errorf("delivered %v, want 1 and 3 once each", got)
	}
}

// A refused event that goes through on a later try loses its row: status
// counts only what still fails.
func TestAnEventSentAfterARefusalIsForgotten(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := sqstest.NewQueue(t, sqstest.Client(t), "relay-forget", nil)
	s := newTestService(t, db, Config{Target: url})
	publish(t, db, "a", "", badPayload)
	st := newStream(s, &Result{})
	steps(t, st, db, 1)
	if n := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.relay_parked`); n != 1 {
		t.Fatalf("%d rows after the refusal, want 1", n)
	}
	// The event cannot change; what changes is what the target takes. A
	// batch in hand whose entry is now acceptable stands for that.
	st.cur.entries[0].msg.Body = []byte(`{"fixed":true}`)
	steps(t, st, db, 1)
	if st.position != 1 {
		t.Fatalf("position %d, want 1", st.position)
	}
	if n := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.relay_parked`); n != 0 {
		t.Errorf("%d rows after it was sent, want 0", n)
	}
}

// A parked event an operator asks to have re-sent goes at the next pass,
// with its dedup id, and its row records it.
func TestParkedEventIsResentOnRequest(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := sqstest.NewQueue(t, sqstest.Client(t), "relay-resend", nil)
	s := newTestService(t, db, Config{Target: url, MaxAttempts: 1})
	publish(t, db, "a", "", `{"n":1}`, `{"n":2}`)
	st := newStream(s, &Result{})
	steps(t, st, db, 3)
	drain(t, url, 2)
	// Park 1 by hand, as if the target had refused it, and ask for it.
	db.Exec(t, `INSERT INTO outbox.relay_parked (relay, sequence, topic, attempts, error, parked_at, resend_requested_at)
		VALUES ('default', 1, 'a', 1, 'InvalidMessageContents: x', now(), now())`)
	res := &Result{}
	st = newStream(s, res)
	if err := st.resend(context.Background(), db.Pool, time.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if res.Resent != 1 {
		t.Errorf("resent %d, want 1", res.Resent)
	}
	if got := drain(t, url, 1); fmt.Sprint(got) != "[{1 }]" {
		t.Errorf("re-sent %v, want 1", got)
	}
	if n := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.relay_parked WHERE resent_at IS NOT NULL`); n != 1 {
		t.Errorf("%d rows marked re-sent, want 1", n)
	}
}

// RELAY_AGGREGATE_TYPES sends only the listed aggregate types, and
// RELAY_GROUP_BY=aggregate_id makes each aggregate a group (an event
// without one is grouped by its topic); the position passes what is not
// sent.
func TestAggregateTypesSelectAndAggregateIDGroups(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := sqstest.NewQueue(t, sqstest.Client(t), "relay-aggregate", map[string]string{"FifoQueue": "true"})
	publishRouted(t, db, "order.placed", "order", "o-1")    // 1
	publishRouted(t, db, "invoice.paid", "invoice", "i-1")  // 2
	publishRouted(t, db, "order.shipped", "order", "o-1")   // 3
	publishRouted(t, db, "order.placed", "order", "o-2")    // 4
	publishRouted(t, db, "order.placed", "", "")            // 5: no type
	publishRouted(t, db, "order.noted", "order", "")        // 6: no id
	publishRouted(t, db, "shipment.sent", "shipment", "s1") // 7
	s := newTestService(t, db, Config{Target: url, Bounded: true, GroupBy: GroupByAggregateID, AggregateTypes: "order, shipment"})
	r := runPass(t, s)
	if r.Position != 7 {
		t.Errorf("position %d, want 7: past the events not sent", r.Position)
	}
	if r.Sent != 5 {
		t.Errorf("sent %d, want 5 (1, 3, 4, 6, 7)", r.Sent)
	}
	got := drain(t, url, 6, 3*time.Second)
	if err := oncePerGroupInOrder(got, []int64{1, 3, 4, 6, 7}); err != nil {
		t.Errorf("the queue received %v: %v", got, err)
	}
	groups := map[int64]string{}
	for _, m := range got {
		groups[m.seq] = m.group
	}
	for seq, want := range map[int64]string{1: "o-1", 3: "o-1", 4: "o-2", 6: "order.noted", 7: "s1"} {
		if groups[seq] != want {
			t.Errorf("event %d in group %q, want %q", seq, groups[seq], want)
		}
	}
}
