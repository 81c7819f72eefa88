package main

// The deliver function's real bootstrap under aws-lambda-rie, against
// PostgreSQL and the local stack's emulators: fauxqs (SQS, and SNS fanned
// out to SQS), moto (EventBridge, read back through a rule that targets
// moto's SQS; Secrets Manager for the signing key), and a real HTTPS
// webhook with a certificate the test makes.

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/awstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/webhooktest"
	"github.com/outboxkeeper/outboxkeeper/shared/deliver"
)

var schedule = []byte(`{"source":"outboxkeeper.schedule"}`)

// deliverFn starts the bootstrap as the maintainer with the stack's
// endpoints (Secrets Manager on moto), a bounded pass, and env over that.
func deliverFn(t *testing.T, db *testdb.DB, env map[string]string) *lambdatest.Function {
	t.Helper()
	moto := testenv.Require(t, "AWS_ENDPOINT_URL_EVENTBRIDGE")
	vars := map[string]string{
		"DATABASE_URL":                     db.Maintainer(t).URL,
		"AWS_ENDPOINT_URL_SNS":             testenv.Require(t, "AWS_ENDPOINT_URL_SNS"),
		"AWS_ENDPOINT_URL_EVENTBRIDGE":     moto,
		"AWS_ENDPOINT_URL_SECRETS_MANAGER": moto,
		"DELIVER_WATCH":                    "false",
		"DELIVER_PASS_BUDGET":              "10s",
		"DELIVER_TICK":                     "50ms",
		"STACK_NAME":                       "deliver-test",
	}
	for k, v := range env {
		vars[k] = v
	}
	return lambdatest.Start(t, lambdatest.Build(t, "deliver"), vars)
}

type response struct {
	Claimed    int64            `json:"claimed"`
	Delivered  int64            `json:"delivered"`
	PushFailed int64            `json:"push_failed"`
	Dead       map[string]int64 `json:"dead"`
	LastError  string           `json:"last_error"`
	Error      string           `json:"error"`
}

func invoke(t *testing.T, fn *lambdatest.Function) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := fn.Invoke(ctx, schedule)
	if err != nil {
		t.Fatalf("invoke: %v\n%s\nlogs:\n%s", err, out, fn.Logs())
	}
	var r response
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("the answer is not JSON: %s", out)
	}
	t.Logf("deliver pass: %s", out)
	return r
}

// secret stores value as a new secret on moto and returns its ARN.
func secret(t *testing.T, value string) string {
	t.Helper()
	return awstest.NewSecret(t, awstest.Secrets(t), "deliver-fn", value)
}

// One pass delivers to each kind of target, as the maintainer: an SQS
// queue, an SNS topic, an EventBridge bus and a signed webhook; each
// arrives once and is acked, and the unknown recipient's delivery is dead.
func TestDeliversToEveryKindOfTarget(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	c := sqstest.Client(t)
	queue := sqstest.NewQueue(t, c, "deliver-fn-q", nil)
	sn := awstest.SNS(t)
	topic := awstest.NewTopic(t, sn, "deliver-fn-t", false)
	fanned := sqstest.NewQueue(t, c, "deliver-fn-fan", nil)
	awstest.SubscribeQueue(t, sn, topic, sqstest.QueueARN(t, c, fanned))
	bus := awstest.NewBusToQueue(t, "outboxkeeper."+testdb.Schema)
	rcv := webhooktest.Start(t)
	for name, target := range map[string]string{"queue": queue, "topic": topic, "bus": bus.ARN, "hook": rcv.URL + "/in"} {
		db.Exec(t, `INSERT INTO outbox.recipients (name, target) VALUES ($1, $2)`, name, target)
	}
	ids := map[string]int64{}
	for _, r := range []string{"queue", "topic", "bus", "hook", "nobody"} {
		ids[r] = testdb.Scalar[int64](t, db.Pool, `SELECT outbox.enqueue($1, 'k', convert_to('{"to":"' || $1 || '"}', 'UTF8'))`, r)
	}
	fn := deliverFn(t, db, map[string]string{
		"DELIVER_WEBHOOK_HOSTS": "localhost", "DELIVER_ALLOW_LOOPBACK": "true", "DELIVER_CA_BUNDLE": rcv.CAFile,
		"DELIVER_SIGNING_SECRET_ARN": secret(t, "fn-key"),
	})
	r := invoke(t, fn)
	if r.Delivered != 4 {
		t.Errorf("delivered %d, want 4 (%s)", r.Delivered, r.LastError)
	}
	if r.Dead[deliver.ReasonUnknownRecipient] != 1 {
		t.Errorf("dead %v, want 1 unknown_recipient", r.Dead)
	}
	for name, url := range map[string]string{"queue": queue, "topic": fanned} {
		msgs := sqstest.Drain(t, c, url, 1, 5*time.Second)
		if len(msgs) != 1 || !strings.Contains(*msgs[0].Body, `"delivery_id":`+strconv.FormatInt(ids[name], 10)) {
			t.Errorf("%s: received %d messages, want its delivery once", name, len(msgs))
		}
	}
	msgs := sqstest.Drain(t, bus.SQS, bus.Queue, 1, 5*time.Second)
	var event struct {
		DetailType string `json:"detail-type"`
		Detail     struct {
			ID int64 `json:"delivery_id"`
		} `json:"detail"`
	}
	if len(msgs) != 1 {
		t.Errorf("bus: received %d events, want 1", len(msgs))
	} else if err := json.Unmarshal([]byte(*msgs[0].Body), &event); err != nil || event.Detail.ID != ids["bus"] || event.DetailType != "k" {
		t.Errorf("bus: the event %s, want delivery %d of kind k (%v)", *msgs[0].Body, ids["bus"], err)
	}
	reqs := rcv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the webhook got %d requests, want 1", len(reqs))
	}
	h := reqs[0].Header
	if err := deliver.Verify([]byte("fn-key"), h.Get(deliver.HeaderTimestamp), h.Get(deliver.HeaderSignature), reqs[0].Body, time.Now(), time.Minute); err != nil {
		t.Errorf("the webhook's signature: %v", err)
	}
	if acked := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'acked'`); acked != 4 {
		t.Errorf("%d acked, want 4", acked)
	}
}

// A webhook configured without loopback is refused at dial time: the
// template never sets DELIVER_ALLOW_LOOPBACK, so a recipient pointing into
// the function's own network is never reached.
func TestLoopbackIsRefusedByDefault(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	rcv := webhooktest.Start(t)
	db.Exec(t, `INSERT INTO outbox.recipients (name, target) VALUES ('hook', $1)`, rcv.URL+"/in")
	db.Exec(t, `SELECT outbox.enqueue('hook', 'k', '\x7b7d'::bytea)`)
	fn := deliverFn(t, db, map[string]string{
		"DELIVER_WEBHOOK_HOSTS": "localhost", "DELIVER_CA_BUNDLE": rcv.CAFile, "DELIVER_SIGNING_SECRET_ARN": secret(t, "k"),
	})
	r := invoke(t, fn)
	if r.PushFailed != 1 || !strings.Contains(r.LastError, "loopback") {
		t.Errorf("push_failed %d, last_error %q: want 1, refused as loopback", r.PushFailed, r.LastError)
	}
	if n := len(rcv.Requests()); n != 0 {
		t.Errorf("the webhook got %d requests, want none", n)
	}
}
