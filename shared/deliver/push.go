package deliver

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/outboxkeeper/outboxkeeper/shared/deliver/recipients"
	"github.com/outboxkeeper/outboxkeeper/shared/target"
)

// delivery is one claimed row.
type delivery struct {
	ID           int64
	Recipient    string
	Kind         string
	TenantID     *string
	Payload      []byte
	State        string
	Attempts     int
	Redeliveries int
	CreatedAt    time.Time
	// Target is the recipient's, for a delivered row; DeadReason the
	// claim's reason for a dead one.
	Target     string
	DeadReason string
}

// outcome is what became of one push.
type outcome struct {
	id     int64
	result pushResult
	// reason is why a push failed: the target's code and message, the
	// webhook's status, or the policy's refusal.
	reason string
}

type pusherConfig struct {
	aws         aws.Config
	schema      string
	concurrency int
	timeout     time.Duration
	policy      recipients.Policy
	roots       *x509.CertPool
	secretARN   string
	now         func() time.Time
}

// pusher pushes a batch's deliveries to their targets: AWS targets
// through shared/target's Senders (one per target, kept across passes),
// webhooks as signed POSTs. It never retries: a failed push stays
// delivered, and the sweep redelivers it.
type pusher struct {
	cfg    pusherConfig
	keys   *keySource
	client *http.Client

	mu      sync.Mutex
	senders map[string]*target.Sender
}

func newPusher(cfg pusherConfig) *pusher {
	return &pusher{
		cfg:     cfg,
		keys:    newKeySource(cfg.aws, cfg.secretARN),
		client:  cfg.policy.Client(cfg.roots, cfg.timeout, cfg.concurrency),
		senders: map[string]*target.Sender{},
	}
}

// push pushes ds (all delivered, each with its target) and reports each,
// within ctx: a push ctx ends is a failure.
func (p *pusher) push(ctx context.Context, ds []delivery) []outcome {
	out := make([]outcome, 0, len(ds))
	byTarget := map[string][]delivery{}
	var order []string
	var hooks []delivery
	for _, d := range ds {
		if recipients.IsWebhook(d.Target) {
			hooks = append(hooks, d)
			continue
		}
		if byTarget[d.Target] == nil {
			order = append(order, d.Target)
		}
		byTarget[d.Target] = append(byTarget[d.Target], d)
	}
	// One target at a time, each Send as concurrent as the Sender is
	// (DELIVER_CONCURRENCY), then the webhooks as concurrent: never more
	// pushes in flight than the setting.
	for _, t := range order {
		out = append(out, p.sendAWS(ctx, t, byTarget[t])...)
	}
	return append(out, p.sendHooks(ctx, hooks)...)
}

// sender is the target's Sender, made at its first use.
func (p *pusher) sender(raw string) (*target.Sender, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.senders[raw]; ok {
		return s, nil
	}
	t, err := CheckARN(raw)
	if err != nil {
		return nil, err
	}
	s, err := target.New(p.cfg.aws, target.Config{Target: t, Source: "outboxkeeper." + p.cfg.schema, Concurrency: p.cfg.concurrency})
	if err != nil {
		return nil, err
	}
	p.senders[raw] = s
	return s, nil
}

// CheckARN parses a recipient's AWS target: an SQS queue (ARN or URL), an
// SNS topic or an EventBridge bus.
func CheckARN(raw string) (target.Target, error) {
	t, err := target.Parse(raw)
	if err != nil {
		return t, err
	}
	if t.Kind == target.Kinesis {
		return t, fmt.Errorf("target %q: a Kinesis stream is not a recipient's target (want an SQS queue, SNS topic, EventBridge bus or https webhook)", raw)
	}
	return t, nil
}

func (p *pusher) sendAWS(ctx context.Context, raw string, ds []delivery) []outcome {
	out := make([]outcome, len(ds))
	s, err := p.sender(raw)
	if err != nil {
		for i, d := range ds {
			out[i] = outcome{id: d.ID, result: pushFailed, reason: err.Error()}
		}
		return out
	}
	fifo := s.Target().FIFO
	msgs := make([]target.Message, len(ds))
	for i, d := range ds {
		msgs[i] = target.Message{ID: strconv.FormatInt(d.ID, 10), Body: Envelope(d), Type: d.Kind}
		if fifo {
			// A tenant's deliveries in order, each its own dedup id: a
			// redelivery within the queue's window is dropped there.
			msgs[i].Group = d.Recipient
			if d.TenantID != nil && *d.TenantID != "" {
				msgs[i].Group = *d.TenantID
			}
			msgs[i].DedupID = p.cfg.schema + ":delivery:" + strconv.FormatInt(d.ID, 10)
		}
	}
	res := s.Send(ctx, msgs)
	for i, o := range res.Outcomes {
		out[i] = outcome{id: ds[i].ID, result: pushFailed}
		if o.Status == target.Sent {
			out[i].result = pushAcked
		} else {
			out[i].reason = o.Status.String() + ": " + o.Code + " " + o.Message
		}
	}
	return out
}

// Envelope is a delivery's message body on an AWS target:
//
//	{"delivery_id":7,"recipient":"billing","kind":"invoice.paid","tenant_id":"t1","redeliveries":0,"payload":{…}}
//
// the payload as it is when it is JSON, else "payload_base64" instead.
func Envelope(d delivery) []byte {
	var b bytes.Buffer
	b.WriteString(`{"delivery_id":`)
	b.WriteString(strconv.FormatInt(d.ID, 10))
	b.WriteString(`,"recipient":`)
	writeJSON(&b, d.Recipient)
	b.WriteString(`,"kind":`)
	writeJSON(&b, d.Kind)
	b.WriteString(`,"tenant_id":`)
	if d.TenantID == nil {
		b.WriteString("null")
	} else {
		writeJSON(&b, *d.TenantID)
	}
	b.WriteString(`,"redeliveries":`)
	b.WriteString(strconv.Itoa(d.Redeliveries))
	if len(bytes.TrimSpace(d.Payload)) > 0 && json.Valid(d.Payload) {
		b.WriteString(`,"payload":`)
		b.Write(d.Payload)
	} else {
		b.WriteString(`,"payload_base64":"`)
		b.WriteString(base64.StdEncoding.EncodeToString(d.Payload))
		b.WriteString(`"`)
	}
	b.WriteString("}")
	return b.Bytes()
}

func writeJSON(b *bytes.Buffer, s string) {
	j, _ := json.Marshal(s)
	b.Write(j)
}

func (p *pusher) sendHooks(ctx context.Context, ds []delivery) []outcome {
	out := make([]outcome, len(ds))
	if len(ds) == 0 {
		return out
	}
	keys := p.keys.get()
	sem := make(chan struct{}, p.cfg.concurrency)
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = p.sendHook(ctx, keys, d)
		}()
	}
	wg.Wait()
	return out
}

// sendHook POSTs one delivery: its payload as the body, its id,
// recipient, kind and tenant as headers, signed.
func (p *pusher) sendHook(ctx context.Context, keys *Keys, d delivery) outcome {
	o := outcome{id: d.ID, result: pushFailed}
	if keys == nil {
		o.reason = "no signing key read from DELIVER_SIGNING_SECRET_ARN"
		return o
	}
	u, err := p.cfg.policy.CheckURL(d.Target)
	if err != nil {
		o.reason = err.Error()
		return o
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(d.Payload))
	if err != nil {
		o.reason = err.Error()
		return o
	}
	ts := Timestamp(p.cfg.now())
	h := req.Header
	h.Set("Content-Type", contentType(d.Payload))
	h.Set("User-Agent", "outboxkeeper-deliver")
	h.Set(HeaderDeliveryID, strconv.FormatInt(d.ID, 10))
	h.Set(HeaderRecipient, d.Recipient)
	h.Set(HeaderKind, d.Kind)
	if d.TenantID != nil {
		h.Set(HeaderTenant, *d.TenantID)
	}
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderSignature, keys.Sign(ts, d.Payload))
	resp, err := p.client.Do(req)
	if err != nil {
		o.reason = err.Error()
		if recipients.Refused(err) {
			o.reason = "refused at dial: " + err.Error()
		}
		return o
	}
	// A little of the body, so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	o.result = webhookResult(resp.StatusCode)
	if o.result != pushAcked {
		o.reason = "webhook answered " + resp.Status
	}
	return o
}

func contentType(payload []byte) string {
	if len(bytes.TrimSpace(payload)) > 0 && json.Valid(payload) {
		return "application/json"
	}
	return "application/octet-stream"
}
