// Package target is where outboxkeeper sends events and deliveries: an
// EventBridge bus, an SNS topic, an SQS queue or a Kinesis stream, named by
// its ARN (or, for SQS, its queue URL), each through the AWS SDK's own
// client for that service.
//
// "target" because that is the word both of its users configure it by: the
// relay's RELAY_TARGET and a recipient's target column (docs/design.md); a
// "sink" or "bus" would name only some of the four.
//
// It has three parts, each usable alone:
//   - Parse turns the configured ARN or URL into a Target, or a clear error
//     naming the value;
//   - Envelope is the one JSON shape of an event on every target, and DedupID
//     its deduplication id;
//   - Sender sends messages in order: it splits them into calls within the
//     API's limits, sends the calls of different groups concurrently and
//     those of one group in order, and reports every message as sent, failed
//     transient, failed permanent or held behind an earlier failure of its
//     group.
//
// It decides nothing about retries, parking or positions: that is its
// callers' (the relay, deliver), which read the Result.
package target

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Kind is the service a target lives in.
type Kind string

const (
	EventBridge Kind = "eventbridge"
	SNS         Kind = "sns"
	SQS         Kind = "sqs"
	Kinesis     Kind = "kinesis"
)

// Target is a parsed destination.
type Target struct {
	Kind Kind
	// ARN is the resource's ARN: the one given, or for an SQS queue URL the
	// one it implies (empty when the URL's host names no region, as an
	// emulator's may not).
	ARN       string
	Partition string
	Region    string
	Account   string
	// Name is the bus, topic, queue or stream name.
	Name string
	// URL is the SQS queue URL (the one given, or derived from the ARN);
	// empty for other kinds.
	URL string
	// FIFO is set for FIFO SNS topics and SQS queues (names ending .fifo):
	// every message needs a group and a deduplication id.
	FIFO bool
}

func (t Target) String() string {
	if t.ARN != "" {
		return t.ARN
	}
	return t.URL
}

// ParseError is a target value that names no target this package can send
// to. Err says why without repeating the value, so a configuration loader
// can say `config: RELAY_TARGET="…": <Err>`.
type ParseError struct {
	Value string
	Err   error
}

func (e *ParseError) Error() string { return fmt.Sprintf("target %q: %v", e.Value, e.Err) }
func (e *ParseError) Unwrap() error { return e.Err }

// The name rules are AWS's own (CreateEventBus, CreateTopic, CreateQueue,
// CreateStream): checking them here turns a typo into an init error rather
// than a NotFound on the first send.
var (
	partitionRE = regexp.MustCompile(`^aws(-[a-z]+)*$`)
	regionRE    = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-\d+$`)
	accountRE   = regexp.MustCompile(`^\d{12}$`)
	busRE       = regexp.MustCompile(`^[A-Za-z0-9._/-]{1,256}$`)
	topicRE     = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)
	queueRE     = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)
	streamRE    = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
)

// Parse reads an EventBridge bus ARN (arn:…:events:…:event-bus/NAME), an
// SNS topic ARN, an SQS queue ARN or queue URL, or a Kinesis stream ARN
// (arn:…:kinesis:…:stream/NAME). Surrounding spaces are ignored; anything
// else is a *ParseError.
func Parse(value string) (Target, error) {
	s := strings.TrimSpace(value)
	var t Target
	var err error
	switch {
	case s == "":
		err = fmt.Errorf("empty: want an EventBridge bus, SNS topic, SQS queue or Kinesis stream ARN, or an SQS queue URL")
	case strings.HasPrefix(s, "arn:"):
		t, err = parseARN(s)
	case strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://"):
		t, err = parseQueueURL(s)
	default:
		err = fmt.Errorf("neither an ARN (arn:…) nor an SQS queue URL (https://…)")
	}
	if err != nil {
		return Target{}, &ParseError{Value: value, Err: err}
	}
	return t, nil
}

func parseARN(s string) (Target, error) {
	f := strings.SplitN(s, ":", 6)
	if len(f) != 6 {
		return Target{}, fmt.Errorf("malformed ARN: want arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE")
	}
	t := Target{ARN: s, Partition: f[1], Region: f[3], Account: f[4]}
	service, resource := f[2], f[5]
	switch {
	case !partitionRE.MatchString(t.Partition):
		return Target{}, fmt.Errorf("malformed ARN: partition %q", t.Partition)
	case !regionRE.MatchString(t.Region):
		return Target{}, fmt.Errorf("malformed ARN: region %q", t.Region)
	case !accountRE.MatchString(t.Account):
		return Target{}, fmt.Errorf("malformed ARN: account %q is not 12 digits", t.Account)
	}
	switch service {
	case "events":
		name, err := nameAfter(resource, "event-bus/", busRE, "an EventBridge ARN but not an event bus's", "event bus")
		if err != nil {
			return Target{}, err
		}
		t.Kind, t.Name = EventBridge, name
	case "sns":
		isFIFO, ok := fifoName(resource, topicRE, 256)
		if !ok {
			// A subscription ARN (topic:id) lands here too.
			return Target{}, fmt.Errorf("malformed SNS topic name %q", resource)
		}
		t.Kind, t.Name, t.FIFO = SNS, resource, isFIFO
	case "sqs":
		isFIFO, ok := fifoName(resource, queueRE, 80)
		if !ok {
			return Target{}, fmt.Errorf("malformed SQS queue name %q", resource)
		}
		suffix, ok := dnsSuffix[t.Partition]
		if !ok {
			return Target{}, fmt.Errorf("no known SQS endpoint in partition %q: give the queue URL instead", t.Partition)
		}
		t.Kind, t.Name, t.FIFO = SQS, resource, isFIFO
		t.URL = "https://sqs." + t.Region + "." + suffix + "/" + t.Account + "/" + resource
	case "kinesis":
		// A stream consumer's ARN (stream/NAME/consumer/…) fails the name.
		name, err := nameAfter(resource, "stream/", streamRE, "a Kinesis ARN but not a stream's", "Kinesis stream")
		if err != nil {
			return Target{}, err
		}
		t.Kind, t.Name = Kinesis, name
	default:
		return Target{}, fmt.Errorf("unknown kind of target %q: want events (an EventBridge bus), sns, sqs or kinesis", service)
	}
	return t, nil
}

// dnsSuffix is the SQS endpoint's domain per partition, to turn a queue ARN
// into the queue URL SendMessageBatch takes.
var dnsSuffix = map[string]string{
	"aws":        "amazonaws.com",
	"aws-us-gov": "amazonaws.com",
	"aws-cn":     "amazonaws.com.cn",
}

// parseQueueURL reads https://sqs.REGION.amazonaws.com/ACCOUNT/NAME (and
// the legacy REGION.queue.amazonaws.com form). Any host is accepted, so an
// emulator's queue URL works as it does with the SDK: SQS takes the queue
// URL as a parameter, not as the address it sends to.
func parseQueueURL(s string) (Target, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return Target{}, fmt.Errorf("malformed SQS queue URL")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return Target{}, fmt.Errorf("malformed SQS queue URL: want only https://HOST/ACCOUNT/NAME")
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if len(parts) != 2 {
		return Target{}, fmt.Errorf("not an SQS queue URL: want https://HOST/ACCOUNT/NAME")
	}
	account, name := parts[0], parts[1]
	if !accountRE.MatchString(account) {
		return Target{}, fmt.Errorf("malformed SQS queue URL: account %q is not 12 digits", account)
	}
	base := strings.TrimSuffix(name, ".fifo")
	if !queueRE.MatchString(base) || len(name) > 80 {
		return Target{}, fmt.Errorf("malformed SQS queue name %q", name)
	}
	t := Target{Kind: SQS, Account: account, Name: name, URL: s, FIFO: base != name}
	host := u.Hostname()
	if r, ok := strings.CutPrefix(host, "sqs."); ok {
		host = r
	} else if i := strings.Index(host, ".queue."); i > 0 {
		host = host[:i] + "." + host[i+len(".queue."):]
	}
	if region, rest, ok := strings.Cut(host, "."); ok && regionRE.MatchString(region) {
		t.Region, t.Partition = region, "aws"
		switch {
		case strings.HasSuffix(rest, ".cn"):
			t.Partition = "aws-cn"
		case strings.HasPrefix(region, "us-gov-"):
			t.Partition = "aws-us-gov"
		}
		t.ARN = "arn:" + t.Partition + ":sqs:" + region + ":" + account + ":" + name
	}
	return t, nil
}

// nameAfter is the name in an ARN's resource of the type prefix names
// ("stream/"): notIt says which resource the ARN must be when the prefix
// is missing, what names the resource when its name fails re.
func nameAfter(resource, prefix string, re *regexp.Regexp, notIt, what string) (string, error) {
	name, ok := strings.CutPrefix(resource, prefix)
	if !ok {
		return "", fmt.Errorf("%s (want …:%sNAME)", notIt, prefix)
	}
	if !re.MatchString(name) {
		return "", fmt.Errorf("malformed %s name %q", what, name)
	}
	return name, nil
}

// fifoName says whether a topic's or queue's name is FIFO (the .fifo
// suffix) and whether it is well formed: at most maxLen bytes, re holding
// of the rest.
func fifoName(resource string, re *regexp.Regexp, maxLen int) (fifo, ok bool) {
	base := strings.TrimSuffix(resource, ".fifo")
	return base != resource, re.MatchString(base) && len(resource) <= maxLen
}
