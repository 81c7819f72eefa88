package deliver

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

// The webhook request's headers (docs/design.md §6e). A receiver verifies
// Signature over Timestamp and the body (Verify), refuses a timestamp too
// far from its clock, and deduplicates by DeliveryID.
const (
	HeaderDeliveryID = "Outboxkeeper-Delivery-Id"
	HeaderRecipient  = "Outboxkeeper-Recipient"
	HeaderKind       = "Outboxkeeper-Kind"
	HeaderTenant     = "Outboxkeeper-Tenant"
	HeaderTimestamp  = "Outboxkeeper-Timestamp"
	HeaderSignature  = "Outboxkeeper-Signature"
)

// SignatureVersion prefixes each signature in HeaderSignature.
const SignatureVersion = "v1"

// Keys are the signing keys: Current signs every request, and Previous,
// during a rotation, signs it too, so a receiver that knows either key
// verifies it.
type Keys struct {
	Current, Previous []byte
}

// ParseKeys reads the signing secret's value: a JSON object
// {"current": "...", "previous": "..."} ("previous" only while a rotation
// is under way), or any other string as the one current key. Keys are
// used as their UTF-8 bytes.
func ParseKeys(value string) (Keys, error) {
	v := strings.TrimSpace(value)
	if strings.HasPrefix(v, "{") {
		var doc struct {
			Current  *string `json:"current"`
			Previous string  `json:"previous"`
		}
		if err := json.Unmarshal([]byte(v), &doc); err != nil {
			return Keys{}, fmt.Errorf("the signing secret is JSON but not {\"current\": ..., \"previous\": ...}: %w", err)
		}
		if doc.Current == nil || *doc.Current == "" {
			return Keys{}, errors.New(`the signing secret's JSON has no "current" key`)
		}
		k := Keys{Current: []byte(*doc.Current)}
		if doc.Previous != "" && doc.Previous != *doc.Current {
			k.Previous = []byte(doc.Previous)
		}
		return k, nil
	}
	if v == "" {
		return Keys{}, errors.New("the signing secret is empty")
	}
	return Keys{Current: []byte(v)}, nil
}

// Signature is HMAC-SHA256(key, timestamp + "." + body) in hex.
func Signature(key []byte, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Sign is the HeaderSignature value for a request sent at ts:
// "v1=<hex>", and ",v1=<hex>" by the previous key during a rotation.
func (k Keys) Sign(timestamp string, body []byte) string {
	s := SignatureVersion + "=" + Signature(k.Current, timestamp, body)
	if len(k.Previous) > 0 {
		s += "," + SignatureVersion + "=" + Signature(k.Previous, timestamp, body)
	}
	return s
}

// Timestamp is the HeaderTimestamp value of t: Unix seconds.
func Timestamp(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// ErrBadSignature is a request no key of the receiver signed, or one
// signed too long ago.
var ErrBadSignature = errors.New("webhook signature does not verify")

// Verify is the receiver's check, in Go (the README has it in Python and
// Node too): one of the request's v1 signatures is HMAC-SHA256(key,
// timestamp.body) for key, and the timestamp is within tolerance of now.
func Verify(key []byte, timestamp, signatures string, body []byte, now time.Time, tolerance time.Duration) error {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q", ErrBadSignature, timestamp)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp %s is %s from now", ErrBadSignature, timestamp, d)
	}
	want := Signature(key, timestamp, body)
	for _, part := range strings.Split(signatures, ",") {
		v, sig, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok && v == SignatureVersion && hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return ErrBadSignature
}

// keySource reads the signing keys from Secrets Manager, once per pass: a
// rotation (a new "current", the old one as "previous") reaches the next
// pass. A read that fails keeps the keys last read, so a throttled call
// does not stop the webhooks.
type keySource struct {
	arn    string
	client *secretsmanager.Client

	mu   sync.Mutex
	keys *Keys
}

func newKeySource(cfg aws.Config, arn string) *keySource {
	if arn == "" {
		return &keySource{}
	}
	return &keySource{arn: arn, client: secretsmanager.NewFromConfig(cfg)}
}

// refresh reads the secret again.
func (s *keySource) refresh(ctx context.Context) error {
	if s.client == nil {
		return nil
	}
	out, err := s.client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(s.arn)})
	if err != nil {
		return fmt.Errorf("read the signing secret %s: %w", s.arn, err)
	}
	k, err := ParseKeys(aws.ToString(out.SecretString))
	if err != nil {
		return fmt.Errorf("signing secret %s: %w", s.arn, err)
	}
	s.mu.Lock()
	s.keys = &k
	s.mu.Unlock()
	return nil
}

// get is the keys last read, nil when none was ever read.
func (s *keySource) get() *Keys {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys
}
