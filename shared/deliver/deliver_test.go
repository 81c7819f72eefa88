package deliver

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/webhooktest"
)

// A delivery to an SQS queue arrives there in the envelope and is acked.
func TestDeliveryToAQueueIsAcked(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	c := sqstest.Client(t)
	url := sqstest.NewQueue(t, c, "deliver-ack", nil)
	addRecipient(t, db, "billing", url)
	tenant := "t1"
	id := enqueue(t, db, "billing", "invoice.paid", `{"n":7}`, &tenant)
	s := newTestService(t, db, Config{Bounded: true, PassBudget: 10 * time.Second})
	r := runPass(t, s)
	if r.Delivered != 1 {
		t.Errorf("delivered %d, want 1", r.Delivered)
	}
	db.WantDeliveryState(t, id, store.StateAcked)
	msgs := sqstest.Drain(t, c, url, 1, 5*time.Second)
	if len(msgs) != 1 {
		t.Fatalf("the queue holds %d messages, want 1", len(msgs))
	}
	var env struct {
		ID      int64           `json:"delivery_id"`
		Kind    string          `json:"kind"`
		Tenant  string          `json:"tenant_id"`
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal([]byte(*msgs[0].Body), &env); err != nil {
		t.Fatalf("the message is not the envelope: %v", err)
	}
	if env.ID != id {
		t.Errorf("delivery_id %d, want %d", env.ID, id)
	}
	if env.Kind != "invoice.paid" {
		t.Errorf("kind %q, want invoice.paid", env.Kind)
	}
	if env.Tenant != "t1" {
		t.Errorf("tenant_id %q, want t1", env.Tenant)
	}
	if string(env.Payload) != `{"n":7}` {
		t.Errorf("payload %s, want {\"n\":7}", env.Payload)
	}
}

// A delivery to an unknown or a disabled recipient is dead with that
// reason, never left pending nor dropped.
func TestUnknownAndDisabledRecipientsAreDeadWithTheirReason(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := sqstest.NewQueue(t, sqstest.Client(t), "deliver-off", nil)
	addRecipient(t, db, "off", url)
	db.Exec(t, `UPDATE outbox.recipients SET enabled = false WHERE name = 'off'`)
	unknown := enqueue(t, db, "nobody", "k", `{}`, nil)
	disabled := enqueue(t, db, "off", "k", `{}`, nil)
	r := runPass(t, newTestService(t, db, Config{Bounded: true}))
	for _, c := range []struct {
		id     int64
		reason string
	}{{unknown, ReasonUnknownRecipient}, {disabled, ReasonRecipientDisabled}} {
		t.Run(c.reason, func(t *testing.T) {
			st, reason := db.DeliveryState(t, c.id)
			if st != store.StateDead {
				t.Errorf("state %s, want dead", st)
			}
			if reason != c.reason {
				t.Errorf("dead_reason %q, want %q", reason, c.reason)
			}
			if r.Dead[c.reason] != 1 {
				t.Errorf("the result counts %d dead for %s, want 1", r.Dead[c.reason], c.reason)
			}
		})
	}
}

// A webhook is a signed POST of the payload with the delivery's id,
// recipient, kind and tenant as headers; 2xx acks it.
func TestWebhookIsSignedAndAcked(t *testing.T) {
	t.Parallel()
	db, rcv := hookScene(t)
	arn := newSecret(t, `{"current":"k-one"}`)
	tenant := "acme"
	id := enqueue(t, db, "hook", "order.shipped", `{"order":1}`, &tenant)
	r := runPass(t, newTestService(t, db, hookConfig(rcv, arn)))
	if r.Delivered != 1 {
		t.Errorf("delivered %d, want 1", r.Delivered)
	}
	reqs := rcv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the receiver got %d requests, want 1", len(reqs))
	}
	h := reqs[0].Header
	for _, c := range []struct{ header, want string }{
		{HeaderDeliveryID, strconv.FormatInt(id, 10)},
		{HeaderRecipient, "hook"},
		{HeaderKind, "order.shipped"},
		{HeaderTenant, "acme"},
		{"Content-Type", "application/json"},
	} {
		if got := h.Get(c.header); got != c.want {
			t.Errorf("%s = %q, want %q", c.header, got, c.want)
		}
	}
	if string(reqs[0].Body) != `{"order":1}` {
		t.Errorf("body %s, want the payload", reqs[0].Body)
	}
	if err := Verify([]byte("k-one"), h.Get(HeaderTimestamp), h.Get(HeaderSignature), reqs[0].Body, time.Now(), 5*time.Minute); err != nil {
		t.Errorf("the signature does not verify with the key: %v", err)
	}
	db.WantDeliveryState(t, id, store.StateAcked)
}

// During a rotation (the secret's "current" is the new key, "previous"
// the old) each request verifies with either key; after it, only the new.
func TestSignatureVerifiesAcrossAKeyRotation(t *testing.T) {
	t.Parallel()
	db, rcv := hookScene(t)
	arn := newSecret(t, `{"current":"old-key"}`)
	s := newTestService(t, db, hookConfig(rcv, arn))
	verifies := func(req webhooktest.Request, key string) bool {
		return Verify([]byte(key), req.Header.Get(HeaderTimestamp), req.Header.Get(HeaderSignature), req.Body, time.Now(), time.Minute) == nil
	}
	stages := []struct {
		name, secret string
		old, new     bool
	}{
		{"before", `{"current":"old-key"}`, true, false},
		{"during", `{"current":"new-key","previous":"old-key"}`, true, true},
		{"after", `{"current":"new-key"}`, false, true},
	}
	for i, st := range stages {
		putSecret(t, arn, st.secret)
		enqueue(t, db, "hook", "k", `{"stage":`+strconv.Itoa(i)+`}`, nil)
		runPass(t, s)
		reqs := rcv.Requests()
		if len(reqs) != i+1 {
			t.Fatalf("%s: the receiver got %d requests, want %d", st.name, len(reqs), i+1)
		}
		last := reqs[i]
		if got := verifies(last, "old-key"); got != st.old {
			t.Errorf("%s: verifies with the old key = %v, want %v", st.name, got, st.old)
		}
		if got := verifies(last, "new-key"); got != st.new {
			t.Errorf("%s: verifies with the new key = %v, want %v", st.name, got, st.new)
		}
	}
}

// 410 Gone makes the delivery dead (reason gone); any other failure leaves
// it delivered for the sweep.
func TestWebhookAnswers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status int
		state  string
		reason string
	}{
		{http.StatusOK, store.StateAcked, ""},
		{http.StatusAccepted, store.StateAcked, ""},
		{http.StatusGone, store.StateDead, ReasonGone},
		{http.StatusInternalServerError, store.StateDelivered, ""},
		{http.StatusNotFound, store.StateDelivered, ""},
		{http.StatusFound, store.StateDelivered, ""},
	} {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			t.Parallel()
			db, rcv := hookScene(t)
			rcv.Answer(func(_ webhooktest.Request, w http.ResponseWriter) {
				w.Header().Set("Location", "https://169.254.169.254/")
				w.WriteHeader(c.status)
			})
			id := enqueue(t, db, "hook", "k", `{}`, nil)
			runPass(t, newTestService(t, db, hookConfig(rcv, newSecret(t, "key"))))
			st, reason := db.DeliveryState(t, id)
			if st != c.state {
				t.Errorf("state %s, want %s", st, c.state)
			}
			if reason != c.reason {
				t.Errorf("dead_reason %q, want %q", reason, c.reason)
			}
			if n := len(rcv.Requests()); n != 1 {
				t.Errorf("the receiver got %d requests, want 1 (no redirect followed)", n)
			}
		})
	}
}

// A lost answer (the receiver took the request, the connection died before
// its answer) leaves the delivery delivered; the sweep puts it back, and
// the next pass pushes it again: the receiver sees the same delivery id
// twice, and the delivery ends acked.
func TestLostAnswerIsRedeliveredWithTheSameID(t *testing.T) {
	t.Parallel()
	db, rcv := hookScene(t)
	rcv.LoseFirstAnswer()
	id := enqueue(t, db, "hook", "k", `{}`, nil)
	s := newTestService(t, db, hookConfig(rcv, newSecret(t, "key")))
	if r := runPass(t, s); r.PushFailed != 1 {
		t.Errorf("first pass: %d failed pushes, want 1", r.PushFailed)
	}
	if st, _ := db.DeliveryState(t, id); st != store.StateDelivered {
		t.Fatalf("after the lost answer the delivery is %s, want delivered", st)
	}
	b, err := store.NewDeliverySweep(store.MustSchema(testdb.Schema)).ResetStuck(context.Background(), db.Pool,
		store.ResetParams{StuckAfter: time.Microsecond, Limit: 10})
	if err != nil || b.Reset != 1 {
		t.Fatalf("the sweep reset %d (%v), want 1", b.Reset, err)
	}
	if r := runPass(t, s); r.Delivered != 1 {
		t.Errorf("second pass: delivered %d, want 1", r.Delivered)
	}
	reqs := rcv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the receiver got %d requests, want 2", len(reqs))
	}
	if a, b := reqs[0].Header.Get(HeaderDeliveryID), reqs[1].Header.Get(HeaderDeliveryID); a != b || a != strconv.FormatInt(id, 10) {
		t.Errorf("delivery ids %q and %q, want %d twice", a, b, id)
	}
	db.WantDeliveryState(t, id, store.StateAcked)
}

// A webhook that does not answer ends at the budget: the pass returns
// normally soon after it, the push failed and the row left delivered.
func TestSlowWebhookEndsAtTheBudget(t *testing.T) {
	t.Parallel()
	db, rcv := hookScene(t)
	rcv.Hang(t)
	id := enqueue(t, db, "hook", "k", `{}`, nil)
	cfg := hookConfig(rcv, newSecret(t, "key"))
	cfg.PassBudget, cfg.WebhookTimeout = 1500*time.Millisecond, time.Minute
	start := time.Now()
	r := runPass(t, newTestService(t, db, cfg))
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("the pass took %s, want about its 1.5s budget", took)
	}
	if r.PushFailed != 1 {
		t.Errorf("%d failed pushes, want 1", r.PushFailed)
	}
	db.WantDeliveryState(t, id, store.StateDelivered)
}

// A webhook whose allowed host resolves to a loopback address is refused
// at dial time when loopback is not allowed: never requested, left to the
// sweep.
func TestPrivateAddressIsRefusedAtPush(t *testing.T) {
	t.Parallel()
	db, rcv := hookScene(t)
	id := enqueue(t, db, "hook", "k", `{}`, nil)
	cfg := hookConfig(rcv, newSecret(t, "key"))
	cfg.AllowLoopback = false
	r := runPass(t, newTestService(t, db, cfg))
	if r.PushFailed != 1 {
		t.Errorf("%d failed pushes, want 1", r.PushFailed)
	}
	if n := len(rcv.Requests()); n != 0 {
		t.Errorf("the receiver got %d requests, want none", n)
	}
	db.WantDeliveryState(t, id, store.StateDelivered)
}

// Two passes at once, each watching, deliver every row once: the lease
// keeps one working, and the claim's SKIP LOCKED keeps any two claims
// disjoint.
func TestTwoPassesAtOnceDeliverEachRowOnce(t *testing.T) {
	t.Parallel()
	db, rcv := hookScene(t)
	// Few enough that the passes finish well inside their budget: a push
	// the budget cuts off is the sweep's, and would arrive again.
	const n = 200
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload) SELECT 'hook', 'k', '{}'::bytea FROM generate_series(1, $1)`, n)
	cfg := hookConfig(rcv, newSecret(t, "key"))
	cfg.Bounded, cfg.PassBudget = false, 6*time.Second
	var wg sync.WaitGroup
	res := make([]*Result, 2)
	for i := range res {
		s := newTestService(t, db, cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], _ = s.RunOnce(context.Background(), nil)
		}()
	}
	wg.Wait()
	wantEachOnce(t, rcv, n)
	if acked := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'acked'`); acked != n {
		t.Errorf("%d acked, want %d", acked, n)
	}
}

// The claim itself: two claims at once take disjoint rows.
func TestConcurrentClaimsAreDisjoint(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	addRecipient(t, db, "r", "https://example.com/in")
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload) SELECT 'r', 'k', '{}'::bytea FROM generate_series(1, 1000)`)
	s := newTestService(t, db, Config{Bounded: true})
	var wg sync.WaitGroup
	got := make([][]delivery, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = s.claim(context.Background(), db.Pool, 100)
		}()
	}
	wg.Wait()
	seen := map[int64]bool{}
	total := 0
	for _, ds := range got {
		for _, d := range ds {
			if seen[d.ID] {
				t.Errorf("delivery %d claimed twice", d.ID)
			}
			seen[d.ID] = true
			total++
			if d.State != store.StateDelivered || d.Target != "https://example.com/in" || d.Attempts != 1 {
				t.Errorf("claimed %+v, want delivered, its target and 1 attempt", d)
			}
		}
	}
	if total != 800 {
		t.Errorf("%d claimed, want 800", total)
	}
}
