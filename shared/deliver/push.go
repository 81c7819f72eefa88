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
	"slices"
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

// pusher cuts a batch into calls and makes them: AWS targets
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

// call is one push a worker makes: up to a call's worth of deliveries to
// one AWS target (more only when one FIFO group has more in the batch:
// then its calls one after another, in order), or one webhook.
type call struct {
	b  *batch
	ds []delivery
	// sender is the AWS target's, nil for a webhook; err is why the
	// target has none, and every delivery of the call fails without a
	// push.
	sender *target.Sender
	err    error
	// groups are the FIFO groups the call carries, each as target and
	// group: never two calls carrying one in flight at once.
	groups []string
}

// calls cuts one batch's deliveries (all delivered, each with its target)
// into calls: per AWS target, in calls of its Limits' entries, a FIFO
// group's deliveries of the batch all in one call, so after a failure
// nothing later of its group goes (held); per webhook delivery, one call.
func (p *pusher) calls(ds []delivery) []*call {
	var out, hooks []*call
	byTarget := map[string][]delivery{}
	// A batch names a few targets many times: each is judged once.
	webhook := map[string]bool{}
	var order []string
	for _, d := range ds {
		hook, ok := webhook[d.Target]
		if !ok {
			hook = recipients.IsWebhook(d.Target)
			webhook[d.Target] = hook
		}
		if hook {
			hooks = append(hooks, &call{ds: []delivery{d}})
			continue
		}
		if byTarget[d.Target] == nil {
			order = append(order, d.Target)
		}
		byTarget[d.Target] = append(byTarget[d.Target], d)
	}
	for _, t := range order {
		out = append(out, p.targetCalls(t, byTarget[t])...)
	}
	return append(out, hooks...)
}

// targetCalls cuts one AWS target's deliveries into calls.
func (p *pusher) targetCalls(raw string, ds []delivery) []*call {
	s, err := p.sender(raw)
	if err != nil {
		return []*call{{ds: ds, err: err}}
	}
	per := s.Limits().Entries
	var out []*call
	if !s.Target().FIFO {
		for chunk := range slices.Chunk(ds, per) {
			out = append(out, &call{ds: chunk, sender: s})
		}
		return out
	}
	byGroup := map[string][]delivery{}
	var groups []string
	for _, d := range ds {
		g := fifoGroup(d)
		if byGroup[g] == nil {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], d)
	}
	// Whole groups, packed into calls as full as they fit.
	var cur *call
	for _, g := range groups {
		gds := byGroup[g]
		if cur == nil || len(cur.ds)+len(gds) > per {
			cur = &call{sender: s}
			out = append(out, cur)
		}
		cur.ds = append(cur.ds, gds...)
		cur.groups = append(cur.groups, raw+"\x00"+g)
	}
	return out
}

// fifoGroup is a delivery's group on a FIFO target: its tenant, the
// recipient without one.
func fifoGroup(d delivery) string {
	if d.TenantID != nil && *d.TenantID != "" {
		return *d.TenantID
	}
	return d.Recipient
}

// pushCall makes one call and reports each of its deliveries, within ctx:
// a push ctx ends is a failure.
func (p *pusher) pushCall(ctx context.Context, c *call) []outcome {
	switch {
	case c.err != nil:
		out := make([]outcome, len(c.ds))
		for i, d := range c.ds {
			out[i] = outcome{id: d.ID, result: pushFailed, reason: c.err.Error()}
		}
		return out
	case c.sender != nil:
		return p.sendAWS(ctx, c.sender, c.ds)
	}
	return []outcome{p.sendHook(ctx, p.keys.get(), c.ds[0])}
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
	// One lane: the feed's workers are the concurrency, each Send one
	// call at a time, so never more pushes in flight than the setting.
	s, err := target.New(p.cfg.aws, target.Config{Target: t, Source: "outboxkeeper." + p.cfg.schema, Concurrency: 1})
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

func (p *pusher) sendAWS(ctx context.Context, s *target.Sender, ds []delivery) []outcome {
	out := make([]outcome, len(ds))
	fifo := s.Target().FIFO
	msgs := make([]target.Message, len(ds))
	for i, d := range ds {
		msgs[i] = target.Message{ID: strconv.FormatInt(d.ID, 10), Body: Envelope(d), Type: d.Kind}
		if fifo {
			// A tenant's deliveries in order, each its own dedup id: a
			// redelivery within the queue's window is dropped there.
			msgs[i].Group = fifoGroup(d)
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
