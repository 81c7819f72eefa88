// Package recipients is who deliveries go to: the recipients table
// (recipients.sql: `outboxkeeper recipients` runs it, as an operator) and
// the policy a webhook target is held to, at `recipients add` and again at
// every push (no plain http, only allowed hosts, only public addresses,
// checked again on the address dialled). It links no AWS client, so the
// CLI reads and writes recipients without the targets' SDKs.
package recipients

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Hosts are the hosts a webhook may name (DELIVER_WEBHOOK_HOSTS /
// the template's DeliverWebhookHosts): exact names, and *.domain for any
// name under domain (not domain itself).
type Hosts struct {
	exact    map[string]bool
	suffixes []string
}

// ParseHosts reads a comma-separated list of host names and *.domain
// patterns; empty allows none.
func ParseHosts(list string) (Hosts, error) {
	h := Hosts{exact: map[string]bool{}}
	for _, raw := range strings.Split(list, ",") {
		p := strings.ToLower(strings.TrimSpace(raw))
		if p == "" {
			continue
		}
		name := strings.TrimPrefix(p, "*.")
		if !validHostName(name) {
			return Hosts{}, fmt.Errorf("%q is not a host name or *.domain", raw)
		}
		if name != p {
			h.suffixes = append(h.suffixes, "."+name)
		} else {
			h.exact[name] = true
		}
	}
	return h, nil
}

func validHostName(s string) bool {
	if s == "" || len(s) > 253 || strings.ContainsAny(s, "*/:@ ") {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
	}
	return true
}

// Allows says host (lower case, no port) may be named by a webhook.
func (h Hosts) Allows(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if h.exact[host] {
		return true
	}
	for _, s := range h.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// Empty says no webhook host is allowed.
func (h Hosts) Empty() bool { return len(h.exact) == 0 && len(h.suffixes) == 0 }

// Resolver resolves a host name to its addresses (net.Resolver's
// LookupNetIP, so tests can point a name at an address).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Policy is what a webhook may reach: the allowed hosts, at public
// addresses only (loopback too when AllowLoopback, for tests).
type Policy struct {
	Hosts         Hosts
	AllowLoopback bool
	Resolver      Resolver
}

// RefusedError is a webhook the policy refuses, at `recipients add` or at
// push time.
type RefusedError struct {
	URL    string
	Reason string
}

func (e *RefusedError) Error() string { return fmt.Sprintf("webhook %s refused: %s", e.URL, e.Reason) }

// IsWebhook says the target is a webhook's URL rather than an AWS ARN or
// SQS queue URL: an http(s) URL that is not an SQS queue URL's shape
// (https://HOST/<12-digit account>/<queue name>, which target.Parse
// reads, an emulator's included). A plain http:// webhook is judged a
// webhook, so it is refused by name rather than mistaken for anything.
func IsWebhook(raw string) bool {
	s := strings.ToLower(strings.TrimSpace(raw))
	if !strings.HasPrefix(s, "https://") && !strings.HasPrefix(s, "http://") {
		return false
	}
	return !queueURL(strings.TrimSpace(raw))
}

var (
	accountRE = regexp.MustCompile(`^\d{12}$`)
	queueRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}(\.fifo)?$`)
)

// queueURL says raw has an SQS queue URL's shape: HOST/ACCOUNT/NAME and
// nothing else (shared/target's Parse reads it).
func queueURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return false
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	return len(parts) == 2 && accountRE.MatchString(parts[0]) && queueRE.MatchString(parts[1])
}

// CheckURL parses raw as a webhook URL and checks it against the policy's
// static rules: https, no user info, an allowed host. It does not resolve.
func (p Policy) CheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	switch {
	case err != nil || u.Host == "":
		return nil, &RefusedError{URL: raw, Reason: "not a URL (want https://HOST/PATH)"}
	case u.Scheme != "https":
		return nil, &RefusedError{URL: raw, Reason: "plain " + u.Scheme + ": a webhook must be https"}
	case u.User != nil:
		return nil, &RefusedError{URL: raw, Reason: "a webhook URL may not carry user information"}
	case u.Fragment != "":
		return nil, &RefusedError{URL: raw, Reason: "a webhook URL may not carry a fragment"}
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if reason := p.refusedAddr(ip); reason != "" {
			return nil, &RefusedError{URL: raw, Reason: reason}
		}
	}
	if !p.Hosts.Allows(host) {
		return nil, &RefusedError{URL: raw, Reason: fmt.Sprintf("host %s is not among the allowed webhook hosts (DeliverWebhookHosts)", host)}
	}
	return u, nil
}

// Check is CheckURL and then the host's addresses: every one must be
// public (a name that resolves to a private address is refused, not
// tried at its public one).
func (p Policy) Check(ctx context.Context, raw string) (*url.URL, error) {
	u, err := p.CheckURL(raw)
	if err != nil {
		return nil, err
	}
	host := u.Hostname()
	if _, err := netip.ParseAddr(host); err == nil {
		return u, nil
	}
	addrs, err := p.resolver().LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("webhook %s: resolve %s: %w", raw, host, err)
	}
	for _, a := range addrs {
		if reason := p.refusedAddr(a); reason != "" {
			return nil, &RefusedError{URL: raw, Reason: fmt.Sprintf("%s resolves to %s", host, reason)}
		}
	}
	return u, nil
}

func (p Policy) resolver() Resolver {
	if p.Resolver != nil {
		return p.Resolver
	}
	return net.DefaultResolver
}

// refusedAddr says why a webhook may not be dialled at ip, or "".
func (p Policy) refusedAddr(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case ip.IsLoopback():
		if p.AllowLoopback {
			return ""
		}
		return fmt.Sprintf("the loopback address %s", ip)
	case ip.IsPrivate():
		return fmt.Sprintf("the private address %s", ip)
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		// 169.254.169.254 is the instance metadata service.
		return fmt.Sprintf("the link-local address %s", ip)
	case ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast():
		return fmt.Sprintf("the non-unicast address %s", ip)
	case sharedAddressSpace.Contains(ip):
		return fmt.Sprintf("the carrier-grade NAT address %s", ip)
	}
	return ""
}

// sharedAddressSpace is RFC 6598's 100.64.0.0/10, private in practice.
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

// Client is the webhooks' HTTP client: each connection's address is
// checked as it is dialled (so a name that resolves to a public address
// at `recipients add` and to a private one later is refused then), no
// proxy, no redirect followed, TLS verified against roots (the system's
// when nil).
func (p Policy) Client(roots *x509.CertPool, timeout time.Duration, conns int) *http.Client {
	dialer := &net.Dialer{
		Timeout: timeout,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("dial %s: %w", address, err)
			}
			if reason := p.refusedAddr(ap.Addr()); reason != "" {
				return &RefusedError{URL: address, Reason: reason}
			}
			return nil
		},
	}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: timeout,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		// A redirect is the receiver's misconfiguration, and following one
		// could lead anywhere: the 3xx itself is the answer.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Refused says err is the policy's refusal (at dial time, wrapped by the
// transport).
func Refused(err error) bool {
	var re *RefusedError
	return errors.As(err, &re)
}
