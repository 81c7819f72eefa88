package deliver

import (
	"errors"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/setting"
)

func TestWebhookResult(t *testing.T) {
	for _, c := range []struct {
		status int
		want   pushResult
	}{
		{200, pushAcked}, {204, pushAcked}, {299, pushAcked},
		{410, pushGone},
		{301, pushFailed}, {400, pushFailed}, {404, pushFailed}, {429, pushFailed}, {500, pushFailed}, {503, pushFailed},
	} {
		if got := webhookResult(c.status); got != c.want {
			t.Errorf("webhookResult(%d) = %d, want %d", c.status, got, c.want)
		}
	}
}

func TestParseKeys(t *testing.T) {
	for _, c := range []struct {
		value         string
		current, prev string
		wantErr       bool
	}{
		{value: "plain-key", current: "plain-key"},
		{value: `{"current":"b","previous":"a"}`, current: "b", prev: "a"},
		{value: `{"current":"b","previous":"b"}`, current: "b"},
		{value: `{"current":"b"}`, current: "b"},
		{value: `{"previous":"a"}`, wantErr: true},
		{value: `{"current":`, wantErr: true},
		{value: "  ", wantErr: true},
	} {
		k, err := ParseKeys(c.value)
		if (err != nil) != c.wantErr {
			t.Errorf("ParseKeys(%q) error %v, want error %v", c.value, err, c.wantErr)
			continue
		}
		if string(k.Current) != c.current || string(k.Previous) != c.prev {
			t.Errorf("ParseKeys(%q) = %q/%q, want %q/%q", c.value, k.Current, k.Previous, c.current, c.prev)
		}
	}
}

func TestVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	ts := Timestamp(now)
	body := []byte(`{"a":1}`)
	sig := Keys{Current: []byte("new"), Previous: []byte("old")}.Sign(ts, body)
	for _, c := range []struct {
		name     string
		key      string
		ts       string
		body     []byte
		at       time.Time
		verifies bool
	}{
		{"the current key", "new", ts, body, now, true},
		{"the previous key", "old", ts, body, now, true},
		{"another key", "other", ts, body, now, false},
		{"another body", "new", ts, []byte(`{"a":2}`), now, false},
		{"another timestamp", "new", Timestamp(now.Add(time.Second)), body, now, false},
		{"too late", "new", ts, body, now.Add(6 * time.Minute), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Verify([]byte(c.key), c.ts, sig, c.body, c.at, 5*time.Minute)
			if (err == nil) != c.verifies {
				t.Errorf("Verify = %v, want verifies %v", err, c.verifies)
			}
		})
	}
}

// The signature is the documented one: HMAC-SHA256 of "<ts>.<body>".
func TestSignatureIsTheDocumentedHMAC(t *testing.T) {
	// python3 -c 'import hmac,hashlib; print(hmac.new(b"key", b"1800000000.{\"a\":1}", hashlib.sha256).hexdigest())'
	const want = "7330c9cf7d886970cbebbbb5494c04d2aeff06a990adb7d7a75abfeb0159d291"
	if got := Signature([]byte("key"), "1800000000", []byte(`{"a":1}`)); got != want {
		t.Errorf("Signature = %s, want %s", got, want)
	}
}

func TestEnvelopeCarriesThePayloadOrItsBase64(t *testing.T) {
	tenant := "t"
	if got := string(Envelope(delivery{ID: 3, Recipient: "r", Kind: "k", TenantID: &tenant, Payload: []byte(`{"x":1}`)})); got !=
		`{"delivery_id":3,"recipient":"r","kind":"k","tenant_id":"t","redeliveries":0,"payload":{"x":1}}` {
		t.Errorf("JSON payload: %s", got)
	}
	if got := string(Envelope(delivery{ID: 4, Recipient: "r", Kind: "k", Payload: []byte{0xff, 0x00}})); got !=
		`{"delivery_id":4,"recipient":"r","kind":"k","tenant_id":null,"redeliveries":0,"payload_base64":"/wA="}` {
		t.Errorf("binary payload: %s", got)
	}
}

func TestConfigNamesTheFieldItRefuses(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"webhooks without a key", Config{WebhookHosts: "hooks.example.com"}, "SigningSecretARN"},
		{"a bad host", Config{WebhookHosts: "https://x", SigningSecretARN: "arn"}, "WebhookHosts"},
		{"a missing CA bundle", Config{CABundle: "/nonexistent/ca.pem"}, "CABundle"},
		{"a batch too large", Config{BatchLimit: MaxBatch + 1}, "BatchLimit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var se *setting.Error
			if err := c.cfg.Validate(); !errors.As(err, &se) || se.Field != c.field {
				t.Errorf("Validate = %v, want an error naming %s", err, c.field)
			}
		})
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("the default Config: %v", err)
	}
}

// The feed hands out a FIFO group's calls one at a time and in the order
// they came: a call is passed over while a call carrying one of its groups
// is in flight, or still waits ahead of it.
func TestFeedKeepsAGroupsCallsOneAtATimeInOrder(t *testing.T) {
	f := newFeed(t.Context(), nil, time.Now().Add(time.Minute), 0, time.Now, nil)
	defer f.close()
	b := &batch{left: 4}
	mk := func(groups ...string) *call { return &call{b: b, groups: groups} }
	inFlight, ahead, free, behind := mk("q\x00a"), mk("q\x00a", "q\x00b"), mk("q\x00c"), mk("q\x00b")
	f.queue = []*call{inFlight, ahead, free, behind}
	if c := f.take(); c != inFlight {
		t.Fatalf("the first take is not the first call")
	}
	if c := f.take(); c != free {
		t.Errorf("with group a in flight, the take is not the call of group c alone")
	}
	if i := f.next(); i != -1 {
		t.Errorf("the call of group b behind a waiting call of group b may go (index %d)", i)
	}
	f.done(inFlight, nil)
	if c := f.take(); c != ahead {
		t.Errorf("once group a returned, the take is not the call of groups a and b")
	}
}

// The next claim goes out at once when nothing is in hand; ahead of the
// pushes only after a whole batch, with no successor, once the calls
// waiting are down to two a worker or the last claim's number, and with
// time for two more batches like the last.
func TestClaimNow(t *testing.T) {
	const conc = 8
	for _, c := range []struct {
		name      string
		l         load
		more      bool
		successor bool
		left      time.Duration
		want      bool
	}{
		{"nothing in hand", load{}, false, true, 0, true},
		{"calls waiting, after a short batch", load{queued: 1, calls: 10}, false, false, time.Minute, false},
		{"two calls a worker waiting", load{queued: 16, inflight: 8, calls: 10}, true, false, time.Minute, true},
		{"more than two a worker waiting", load{queued: 17, inflight: 8, calls: 10}, true, false, time.Minute, false},
		{"a large batch's worth waiting", load{queued: 100, inflight: 8, calls: 100}, true, false, time.Minute, true},
		{"more than a large batch's worth", load{queued: 101, inflight: 8, calls: 100}, true, false, time.Minute, false},
		{"a successor waits", load{queued: 1, calls: 10}, true, true, time.Minute, false},
		{"no time for two more batches", load{queued: 1, calls: 10, last: 2 * time.Second}, true, false, 4 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := claimNow(c.l, conc, c.more, c.successor, c.left); got != c.want {
				t.Errorf("claimNow = %v, want %v", got, c.want)
			}
		})
	}
}
