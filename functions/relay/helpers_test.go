package main

// The relay's real bootstrap under aws-lambda-rie, against PostgreSQL and
// the local stack's emulators: fauxqs (SQS, SNS and its SNS -> SQS
// fan-out), kinesalite (Kinesis) and moto (EventBridge, read back through
// a rule that targets moto's SQS).

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/envelopetest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
	"github.com/outboxkeeper/outboxkeeper/shared/relay"
)

// schedule is what EventBridge Scheduler hands the function.
var schedule = []byte(`{"source":"outboxkeeper.schedule"}`)

// badPayload is a payload SQS refuses in a message body (U+FFFF), as
// fauxqs does per entry with InvalidMessageContents; jsonb keeps it as is.
const badPayload = `{"bad":"\uffff"}`

// maintainers is each test database's maintainer login: the relay runs
// with the rights grant_maintainer gives, as a deployed one does.
var maintainers sync.Map // *testdb.DB -> URL

func maintainerURL(t *testing.T, db *testdb.DB) string {
	t.Helper()
	if u, ok := maintainers.Load(db); ok {
		return u.(string)
	}
	u, _ := maintainers.LoadOrStore(db, db.Maintainer(t).URL)
	return u.(string)
}

// relayFn starts the relay's bootstrap as the maintainer, with the stack's
// endpoints, a bounded pass (RELAY_WATCH=false) of 10s and a 50ms tick,
// and env over that.
func relayFn(t *testing.T, db *testdb.DB, env map[string]string) *lambdatest.Function {
	t.Helper()
	vars := map[string]string{
		"DATABASE_URL":                 maintainerURL(t, db),
		"AWS_ENDPOINT_URL_SNS":         testenv.Require(t, "AWS_ENDPOINT_URL_SNS"),
		"AWS_ENDPOINT_URL_KINESIS":     testenv.Require(t, "AWS_ENDPOINT_URL_KINESIS"),
		"AWS_ENDPOINT_URL_EVENTBRIDGE": testenv.Require(t, "AWS_ENDPOINT_URL_EVENTBRIDGE"),
		"RELAY_WATCH":                  "false",
		"RELAY_PASS_BUDGET":            "10s",
		"RELAY_TICK":                   "50ms",
		"STACK_NAME":                   "relay-test",
	}
	maps.Copy(vars, env)
	return lambdatest.Start(t, lambdatest.Build(t, "relay"), vars)
}

// response is a relay pass's answer, decoded into the Result the pass
// builds it from; invoke checks the wire names the tests read are there.
type response = relay.Result

// answerKeys are the answer's fields the tests read, by their wire names
// (the omitempty ones, last_error, timed_out and error, only when set).
var answerKeys = []string{"relay", "position", "head", "lag", "sent", "skipped", "refused", "parked", "transient", "resent",
	"batches", "waiting", "stopped_at", "lease_wait_ms", "handed_over", "taken_back", "statements", "duration_ms"}

// invoke runs one pass as the schedule does and reads its answer.
func invoke(t *testing.T, fn *lambdatest.Function) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := fn.Invoke(ctx, schedule)
	if err != nil {
		t.Fatalf("invoke: %v\n%s\nlogs:\n%s", err, out, fn.Logs())
	}
	lambdatest.Response(t, out, answerKeys...)
	var r response
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("the answer is not a relay Result: %v: %s", err, out)
	}
	t.Logf("relay pass: %s", out)
	return r
}

// publish commits one event per payload on topic (headers as given, or
// none) and returns their sequences.
func publish(t *testing.T, db *testdb.DB, topic, headers string, payloads ...string) []int64 {
	t.Helper()
	var h any
	if headers != "" {
		h = headers
	}
	var seqs []int64
	for _, p := range payloads {
		seqs = append(seqs, testdb.Scalar[int64](t, db.Pool, `SELECT outbox.publish($1, $2::jsonb, $3::jsonb)`, topic, p, h))
	}
	return seqs
}

// n payloads {"n":i}.
func payloads(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"n":%d}`, i)
	}
	return out
}

// got is one message a queue received.
type got struct {
	env     envelopetest.Envelope
	group   string
	dedupID string
}

// drain reads what a queue received: want messages, or what arrived within
// wait (sqstest.Drain).
func drain(t *testing.T, c *sqs.Client, url string, want int, wait time.Duration) []got {
	t.Helper()
	var out []got
	for _, m := range receive(t, c, url, want, wait) {
		out = append(out, got{
			env:     envelopetest.Parse(t, aws.ToString(m.Body)),
			group:   m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)],
			dedupID: m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageDeduplicationId)],
		})
	}
	return out
}

// receive is sqstest.Drain: each message once, read without racing its
// visibility.
func receive(t *testing.T, c *sqs.Client, url string, want int, wait time.Duration) []sqstypes.Message {
	t.Helper()
	return sqstest.Drain(t, c, url, want, wait)
}

// exactlyOnceInOrder says msgs hold each of want's sequences once, in
// ascending order within each group (by groupOf).
func exactlyOnceInOrder(t *testing.T, msgs []got, want []int64, groupOf func(got) string) {
	t.Helper()
	seen, last := map[int64]int{}, map[string]int64{}
	for _, m := range msgs {
		seen[m.env.Sequence]++
		g := groupOf(m)
		if m.env.Sequence <= last[g] {
			t.Errorf("group %q: sequence %d arrived after %d", g, m.env.Sequence, last[g])
		}
		last[g] = m.env.Sequence
	}
	for _, w := range want {
		if seen[w] != 1 {
			t.Errorf("sequence %d arrived %d times, want once", w, seen[w])
		}
		delete(seen, w)
	}
	for s, n := range seen {
		t.Errorf("sequence %d arrived %d times, want never", s, n)
	}
}

func byTopic(m got) string { return m.env.Topic }

// silentListener accepts connections and never answers: a target that
// times out.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + l.Addr().String()
}

// emf returns the values of the EMF lines in logs.
func emf(logs string) []map[string]any {
	var out []map[string]any
	for _, line := range lambdatest.JSONLines(logs) {
		if _, ok := line["_aws"]; ok {
			out = append(out, line)
		}
	}
	return out
}

func position(t *testing.T, db *testdb.DB, relay string) int64 {
	t.Helper()
	return testdb.Scalar[int64](t, db.Pool, `SELECT position FROM outbox.consumers WHERE name = $1`, "relay:"+relay)
}

func streamName(arn string) string { return arn[strings.LastIndex(arn, "/")+1:] }
