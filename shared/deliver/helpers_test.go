package deliver

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/awstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/passtest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/webhooktest"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// newSecret stores value as a new secret on moto and returns its ARN.
func newSecret(t *testing.T, value string) string {
	t.Helper()
	return awstest.NewSecret(t, awstest.Secrets(t), "deliver-signing", value)
}

// putSecret gives the secret a new value (a rotation's step).
func putSecret(t *testing.T, arn, value string) {
	t.Helper()
	awstest.PutSecret(t, awstest.Secrets(t), arn, value)
}

// hookConfig is a bounded pass's Config that pushes webhooks to rcv (with
// its CA, loopback allowed), signed with the secret at arn.
func hookConfig(rcv *webhooktest.Receiver, arn string) Config {
	return Config{
		WebhookHosts: "localhost", SigningSecretARN: arn, CABundle: rcv.CAFile, AllowLoopback: true,
		Bounded: true, Tick: 20 * time.Millisecond, PassBudget: 10 * time.Second,
	}
}

// newTestService is a Service on db with cfg, its logs and metrics
// discarded.
func newTestService(t testing.TB, db *testdb.DB, cfg Config) *Service {
	t.Helper()
	cfg.Schema = testdb.Schema
	s, err := New(db.Pool, cfg, Options{AWS: awstest.Config(t), Options: passtest.Options("deliver")})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func runPass(t *testing.T, s *Service) *Result {
	t.Helper()
	res, err := s.RunOnce(context.Background(), nil)
	if err != nil {
		t.Fatalf("RunOnce: %v (%s)", err, pass.String(res))
	}
	t.Logf("deliver pass: %s", pass.String(res))
	return res
}

// hookScene is a database with one recipient, "hook", a webhook to the
// receiver it returns (which answers 204 until told otherwise).
func hookScene(t *testing.T) (*testdb.DB, *webhooktest.Receiver) {
	t.Helper()
	db := testdb.New(t)
	rcv := webhooktest.Start(t)
	addRecipient(t, db, "hook", rcv.URL+"/in")
	return db, rcv
}

// addRecipient adds a recipient as the operator does, unchecked.
func addRecipient(t *testing.T, db *testdb.DB, name, target string) {
	t.Helper()
	db.Exec(t, `INSERT INTO outbox.recipients (name, target) VALUES ($1, $2)`, name, target)
}

// enqueue adds a delivery through the SQL enqueue() and returns its id.
func enqueue(t *testing.T, db *testdb.DB, recipient, kind, payload string, tenant *string) int64 {
	t.Helper()
	return testdb.Scalar[int64](t, db.Pool, `SELECT outbox.enqueue($1, $2, convert_to($3, 'UTF8'), $4)`, recipient, kind, payload, tenant)
}

// wantEachOnce checks that the receiver got n distinct deliveries, each
// once.
func wantEachOnce(t *testing.T, rcv *webhooktest.Receiver, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range rcv.Requests() {
		seen[r.Header.Get(HeaderDeliveryID)]++
	}
	if len(seen) != n {
		t.Errorf("%d distinct deliveries arrived, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("delivery %s arrived %d times, want once", id, k)
		}
	}
}
