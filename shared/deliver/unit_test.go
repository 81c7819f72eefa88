package deliver

import (
	"context"
	"errors"
	"net/netip"
	"strings"
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

func TestHostsAllowExactNamesAndSubdomainsOfWildcards(t *testing.T) {
	h, err := ParseHosts("hooks.example.com, *.partner.io")
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"hooks.example.com": true, "HOOKS.example.com": true, "example.com": false, "x.hooks.example.com": false,
		"a.partner.io": true, "a.b.partner.io": true, "partner.io": false, "evilpartner.io": false,
	} {
		if got := h.Allows(host); got != want {
			t.Errorf("Allows(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestParseHostsRefusesWhatIsNotAHost(t *testing.T) {
	for _, bad := range []string{"https://x.com", "x.com:443", "*", "a..b", "*.*.x.com", "user@x.com"} {
		if _, err := ParseHosts(bad); err == nil {
			t.Errorf("ParseHosts(%q) accepted it", bad)
		}
	}
}

// staticResolver answers every name with its addresses.
type staticResolver []netip.Addr

func (r staticResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return r, nil
}

// The check `recipients add` makes: https only, an allowed host, and every
// address the host resolves to public.
func TestPolicyRefusesWebhooksOutsideThePolicy(t *testing.T) {
	hosts, _ := ParseHosts("hooks.example.com,10.1.2.3,169.254.169.254,localhost")
	public := Policy{Hosts: hosts, Resolver: staticResolver{netip.MustParseAddr("93.184.216.34")}}
	for _, c := range []struct {
		name   string
		policy Policy
		url    string
		why    string
	}{
		{"plain http", public, "http://hooks.example.com/in", "must be https"},
		{"another host", public, "https://other.example.com/in", "not among the allowed"},
		{"user info", public, "https://u:p@hooks.example.com/in", "user information"},
		{"a private literal", public, "https://10.1.2.3/in", "private address"},
		{"the metadata service", public, "https://169.254.169.254/latest", "link-local"},
		{"a name resolving to a private address", Policy{Hosts: hosts, Resolver: staticResolver{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("192.168.1.1")}},
			"https://hooks.example.com/in", "private address 192.168.1.1"},
		{"loopback unless allowed", Policy{Hosts: hosts, Resolver: staticResolver{netip.MustParseAddr("127.0.0.1")}}, "https://localhost/in", "loopback"},
		{"IPv4-mapped private", Policy{Hosts: hosts, Resolver: staticResolver{netip.MustParseAddr("::ffff:10.0.0.1")}}, "https://hooks.example.com/in", "private"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckTarget(context.Background(), c.policy, c.url)
			var re *RefusedError
			if !errors.As(err, &re) {
				t.Fatalf("CheckTarget(%s) = %v, want a refusal", c.url, err)
			}
			if !strings.Contains(err.Error(), c.why) {
				t.Errorf("the refusal %q does not say %q", err, c.why)
			}
		})
	}
	if err := CheckTarget(context.Background(), public, "https://hooks.example.com/in"); err != nil {
		t.Errorf("an allowed host at a public address: %v", err)
	}
	loop := Policy{Hosts: hosts, AllowLoopback: true, Resolver: staticResolver{netip.MustParseAddr("127.0.0.1")}}
	if err := CheckTarget(context.Background(), loop, "https://localhost/in"); err != nil {
		t.Errorf("loopback with AllowLoopback: %v", err)
	}
}

func TestTargetsAreAWSOrWebhooks(t *testing.T) {
	for target, hook := range map[string]bool{
		"arn:aws:sqs:us-east-1:123456789012:q":               false,
		"https://sqs.us-east-1.amazonaws.com/123456789012/q": false,
		"http://127.0.0.1:4566/000000000000/q":               false,
		"arn:aws:sns:us-east-1:123456789012:t":               false,
		"arn:aws:events:us-east-1:123456789012:event-bus/b":  false,
		"https://hooks.example.com/in":                       true,
		"http://hooks.example.com/in":                        true,
		"https://hooks.example.com/123456789012/q?x=1":       true,
		"arn:aws:kinesis:us-east-1:123456789012:stream/s":    false,
	} {
		if got := IsWebhook(target); got != hook {
			t.Errorf("IsWebhook(%s) = %v, want %v", target, got, hook)
		}
	}
	if err := CheckTarget(context.Background(), Policy{}, "arn:aws:kinesis:us-east-1:123456789012:stream/s"); err == nil {
		t.Error("a Kinesis stream was accepted as a recipient's target")
	}
	if err := CheckTarget(context.Background(), Policy{}, "arn:aws:sqs:us-east-1:12345:q"); err == nil {
		t.Error("a malformed ARN was accepted")
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
