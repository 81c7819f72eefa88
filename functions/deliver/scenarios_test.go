package main

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/awstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/webhooktest"
	"github.com/outboxkeeper/outboxkeeper/shared/deliver"
)

// hookFn is the function pushing to rcv, signed with key (a secret made
// for the test), with env over that.
func hookFn(t *testing.T, db *testdb.DB, rcv *webhooktest.Receiver, arn string, env map[string]string) *lambdatest.Function {
	t.Helper()
	vars := map[string]string{
		"DELIVER_WEBHOOK_HOSTS": "localhost", "DELIVER_ALLOW_LOOPBACK": "true", "DELIVER_CA_BUNDLE": rcv.CAFile,
		"DELIVER_SIGNING_SECRET_ARN": arn,
	}
	for k, v := range env {
		vars[k] = v
	}
	return deliverFn(t, db, vars)
}

func hookDelivery(t *testing.T, db *testdb.DB, rcv *webhooktest.Receiver) int64 {
	t.Helper()
	db.Exec(t, `INSERT INTO outbox.recipients (name, target) VALUES ('hook', $1) ON CONFLICT DO NOTHING`, rcv.URL+"/in")
	return testdb.Scalar[int64](t, db.Pool, `SELECT outbox.enqueue('hook', 'k', convert_to('{"n":1}', 'UTF8'))`)
}

// 410 Gone makes the delivery dead with reason gone.
func TestGoneMakesTheDeliveryDead(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	rcv := webhooktest.Start(t)
	rcv.Status(http.StatusGone)
	id := hookDelivery(t, db, rcv)
	r := invoke(t, hookFn(t, db, rcv, secret(t, "k"), nil))
	if r.Dead[deliver.ReasonGone] != 1 {
		t.Errorf("dead %v, want 1 gone", r.Dead)
	}
	if st, reason := db.DeliveryState(t, id); st != store.StateDead || reason != deliver.ReasonGone {
		t.Errorf("the delivery is %s (%q), want dead (gone)", st, reason)
	}
}

// A lost answer leaves the delivery delivered; once the sweep puts it back
// the next pass pushes it again, and the receiver sees its id twice.
func TestLostAnswerArrivesTwiceWithOneID(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	rcv := webhooktest.Start(t)
	rcv.LoseFirstAnswer()
	id := hookDelivery(t, db, rcv)
	fn := hookFn(t, db, rcv, secret(t, "k"), nil)
	if r := invoke(t, fn); r.PushFailed != 1 {
		t.Errorf("first pass: push_failed %d, want 1", r.PushFailed)
	}
	// What the sweep does to a delivery stuck past SWEEP_STUCK_AFTER.
	db.Exec(t, `SELECT * FROM outbox.sweep_reset(0, 10, 0)`)
	if r := invoke(t, fn); r.Delivered != 1 {
		t.Errorf("second pass: delivered %d, want 1", r.Delivered)
	}
	reqs := rcv.Requests()
	if len(reqs) != 2 || reqs[0].Header.Get(deliver.HeaderDeliveryID) != strconv.FormatInt(id, 10) ||
		reqs[1].Header.Get(deliver.HeaderDeliveryID) != strconv.FormatInt(id, 10) {
		t.Errorf("the receiver got %d requests, want delivery %d twice", len(reqs), id)
	}
	db.WantDeliveryState(t, id, store.StateAcked)
}

// A watching invocation killed with its pushes in flight (its execution
// environment lost) leaves every delivery it claimed delivered, none
// acked and none lost; once the sweep puts them back, the next watching
// invocation takes the dead one's lease when it runs out and pushes each
// again under the same id, and acks it.
func TestKilledMidPushEveryClaimedDeliveryIsPushedAgainAndAcked(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	rcv := webhooktest.Start(t)
	rcv.Hang(t)
	db.Exec(t, `INSERT INTO outbox.recipients (name, target) VALUES ('hook', $1)`, rcv.URL+"/in")
	const n = 20
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload) SELECT 'hook', 'k', '{}'::bytea FROM generate_series(1, $1)`, n)
	arn := secret(t, "k")
	// The template's watching pass, with a budget a test can wait for.
	watching := map[string]string{"DELIVER_WATCH": "true", "DELIVER_PASS_BUDGET": "5s"}
	first := hookFn(t, db, rcv, arn, watching)
	invoked := make(chan struct{})
	go func() {
		defer close(invoked)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = first.Invoke(ctx, schedule) // fails: the environment dies
	}()
	deadline := time.Now().Add(20 * time.Second)
	for len(rcv.Requests()) < deliver.DefaultConcurrency {
		if time.Now().After(deadline) {
			t.Fatalf("%d pushes in flight after 20s, want %d", len(rcv.Requests()), deliver.DefaultConcurrency)
		}
		time.Sleep(10 * time.Millisecond)
	}
	first.Kill()
	<-invoked

	count := func(state string) int64 {
		return testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = $1`, state)
	}
	if got := count(store.StateDelivered); got != n {
		t.Errorf("after the kill %d deliveries are delivered, want all %d the claim took", got, n)
	}
	if got := count(store.StateAcked); got != 0 {
		t.Errorf("after the kill %d deliveries are acked, want none: no answer came", got)
	}

	rcv.Answer(nil)
	pushedBefore := len(rcv.Requests())
	// What the sweep does to deliveries stuck past SWEEP_STUCK_AFTER.
	db.Exec(t, `SELECT * FROM outbox.sweep_reset(0, 100, 0)`)
	if r := invoke(t, hookFn(t, db, rcv, arn, watching)); r.Delivered != n {
		t.Errorf("the next invocation delivered %d, want %d", r.Delivered, n)
	}
	if got := count(store.StateAcked); got != n {
		t.Errorf("%d deliveries acked, want %d", got, n)
	}
	again := map[string]int{}
	for _, r := range rcv.Requests()[pushedBefore:] {
		again[r.Header.Get(deliver.HeaderDeliveryID)]++
	}
	if len(again) != n {
		t.Errorf("the next invocation pushed %d distinct ids, want %d", len(again), n)
	}
	redelivered := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE id::text = ANY ($1::text[]) AND redeliveries = 1`, slices.Collect(maps.Keys(again)))
	if redelivered != n {
		t.Errorf("%d of the ids pushed again are deliveries redelivered once, want %d", redelivered, n)
	}
}

// A webhook that never answers ends at the pass budget: the invocation
// answers normally soon after it, the delivery left to the sweep.
func TestSlowWebhookEndsAtTheBudgetUnderRIE(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	rcv := webhooktest.Start(t)
	rcv.Hang(t)
	id := hookDelivery(t, db, rcv)
	fn := hookFn(t, db, rcv, secret(t, "k"), map[string]string{"DELIVER_PASS_BUDGET": "2s", "DELIVER_WEBHOOK_TIMEOUT": "1m"})
	start := time.Now()
	r := invoke(t, fn)
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("the invocation took %s, want about its 2s budget", took)
	}
	if r.PushFailed != 1 || r.Error != "" {
		t.Errorf("push_failed %d error %q, want 1 and none", r.PushFailed, r.Error)
	}
	db.WantDeliveryState(t, id, store.StateDelivered)
}

// A rotation reaches the next pass: with {"current":new,"previous":old}
// each request verifies with either key.
func TestRotationSignsWithBothKeys(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	rcv := webhooktest.Start(t)
	arn := secret(t, `{"current":"old"}`)
	fn := hookFn(t, db, rcv, arn, nil)
	hookDelivery(t, db, rcv)
	invoke(t, fn)
	awstest.PutSecret(t, awstest.Secrets(t), arn, `{"current":"new","previous":"old"}`)
	hookDelivery(t, db, rcv)
	invoke(t, fn)
	reqs := rcv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the receiver got %d requests, want 2", len(reqs))
	}
	verifies := func(r webhooktest.Request, key string) bool {
		return deliver.Verify([]byte(key), r.Header.Get(deliver.HeaderTimestamp), r.Header.Get(deliver.HeaderSignature), r.Body, time.Now(), time.Minute) == nil
	}
	for _, c := range []struct {
		req      int
		key      string
		verifies bool
	}{{0, "old", true}, {0, "new", false}, {1, "old", true}, {1, "new", true}} {
		if got := verifies(reqs[c.req], c.key); got != c.verifies {
			t.Errorf("request %d with key %s: verifies %v, want %v", c.req+1, c.key, got, c.verifies)
		}
	}
}

// Two invocations at once, each watching, push every delivery once.
func TestTwoInvocationsAtOncePushEachDeliveryOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	rcv := webhooktest.Start(t)
	db.Exec(t, `INSERT INTO outbox.recipients (name, target) VALUES ('hook', $1)`, rcv.URL+"/in")
	const n = 300
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload) SELECT 'hook', 'k', '{}'::bytea FROM generate_series(1, $1)`, n)
	arn := secret(t, "k")
	env := map[string]string{"DELIVER_WATCH": "true", "DELIVER_PASS_BUDGET": "5s"}
	fns := []*lambdatest.Function{hookFn(t, db, rcv, arn, env), hookFn(t, db, rcv, arn, env)}
	var wg sync.WaitGroup
	errs := make([]error, len(fns))
	for i, fn := range fns {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, errs[i] = fn.Invoke(ctx, schedule)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("invocation %d: %v", i+1, err)
		}
	}
	seen := map[string]int{}
	for _, r := range rcv.Requests() {
		seen[r.Header.Get(deliver.HeaderDeliveryID)]++
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
