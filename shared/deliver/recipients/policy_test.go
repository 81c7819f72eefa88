package recipients

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

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
