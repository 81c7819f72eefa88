// Package awstest talks to the local stack's AWS emulators beside fauxqs's
// SQS (internal/sqstest) with the real aws-sdk-go-v2 clients: SNS on
// fauxqs, Kinesis on kinesalite, EventBridge and Secrets Manager on moto. Each helper makes a
// fresh, uniquely named resource that is deleted after the test, and reads
// back what the emulator received.
package awstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkeeper/outboxkeeper/internal/awsenv"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// Config is the local stack's SDK configuration, built by awsenv.From (the
// functions' own loader) from what testenv finds, so a client made from it
// reaches each emulator through AWS_ENDPOINT_URL_<SERVICE> as a deployed
// function reaches AWS. It ends the test when the stack's endpoints are
// missing. Secrets Manager is moto's, which serves it beside EventBridge.
func Config(t testing.TB) aws.Config {
	t.Helper()
	for _, v := range []string{"AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_SNS", "AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_EVENTBRIDGE"} {
		testenv.Require(t, v)
	}
	cfg, err := awsenv.From(func(name string) (string, bool) {
		if name == "AWS_ENDPOINT_URL_SECRETS_MANAGER" {
			name = "AWS_ENDPOINT_URL_EVENTBRIDGE"
		}
		v := testenv.Lookup(name)
		return v, v != ""
	})
	if err != nil {
		t.Fatalf("awstest: %v", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return cfg
}

// Name is a unique resource name with the prefix.
func Name(prefix string) string { return sqstest.Name(prefix) }

// SNS is an SNS client on fauxqs.
func SNS(t testing.TB) *sns.Client { return sns.NewFromConfig(Config(t)) }

// NewTopic creates a topic (FIFO when fifo, without content-based
// deduplication, so only the sender's dedup ids count) and returns its ARN.
func NewTopic(t testing.TB, c *sns.Client, prefix string, fifo bool) string {
	t.Helper()
	name, attrs := Name(prefix), map[string]string{}
	if fifo {
		name += ".fifo"
		attrs["FifoTopic"], attrs["ContentBasedDeduplication"] = "true", "false"
	}
	out, err := c.CreateTopic(context.Background(), &sns.CreateTopicInput{Name: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("awstest: create topic %s: %v", name, err)
	}
	arn := aws.ToString(out.TopicArn)
	t.Cleanup(func() { _, _ = c.DeleteTopic(context.Background(), &sns.DeleteTopicInput{TopicArn: aws.String(arn)}) })
	return arn
}

// SubscribeQueue subscribes an SQS queue (by ARN, on the same fauxqs) to
// the topic with raw message delivery: the queue's messages are the bodies
// published, not SNS's notification JSON around them.
func SubscribeQueue(t testing.TB, c *sns.Client, topicARN, queueARN string) {
	t.Helper()
	_, err := c.Subscribe(context.Background(), &sns.SubscribeInput{
		TopicArn: aws.String(topicARN), Protocol: aws.String("sqs"), Endpoint: aws.String(queueARN),
		Attributes: map[string]string{"RawMessageDelivery": "true"},
	})
	if err != nil {
		t.Fatalf("awstest: subscribe %s to %s: %v", queueARN, topicARN, err)
	}
}

// Kinesis is a Kinesis client on kinesalite.
func Kinesis(t testing.TB) *kinesis.Client { return kinesis.NewFromConfig(Config(t)) }

// NewStream creates a stream of the given shards (ACTIVE at once: the stack
// starts kinesalite with no creation delay) and returns its ARN.
func NewStream(t testing.TB, c *kinesis.Client, prefix string, shards int32) string {
	t.Helper()
	ctx := context.Background()
	name := Name(prefix)
	if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)}); err != nil {
		t.Fatalf("awstest: create stream %s: %v", name, err)
	}
	t.Cleanup(func() {
		_, _ = c.DeleteStream(context.Background(), &kinesis.DeleteStreamInput{StreamName: aws.String(name)})
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := c.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
		if err != nil {
			t.Fatalf("awstest: describe stream %s: %v", name, err)
		}
		if d := out.StreamDescriptionSummary; d.StreamStatus == ktypes.StreamStatusActive {
			return aws.ToString(d.StreamARN)
		}
		if time.Now().After(deadline) {
			t.Fatalf("awstest: stream %s not ACTIVE after 10s", name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ReadStream returns every record of the stream, shard by shard from the
// start of each (in each shard's sequence order), reading until want have
// arrived or the timeout passes.
func ReadStream(t testing.TB, c *kinesis.Client, name string, want int, timeout time.Duration) []ktypes.Record {
	t.Helper()
	ctx := context.Background()
	shards, err := c.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(name)})
	if err != nil {
		t.Fatalf("awstest: list shards of %s: %v", name, err)
	}
	iters := make([]*string, len(shards.Shards))
	for i, s := range shards.Shards {
		it, err := c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
			StreamName: aws.String(name), ShardId: s.ShardId, ShardIteratorType: ktypes.ShardIteratorTypeTrimHorizon,
		})
		if err != nil {
			t.Fatalf("awstest: shard iterator of %s: %v", name, err)
		}
		iters[i] = it.ShardIterator
	}
	perShard := make([][]ktypes.Record, len(iters))
	deadline := time.Now().Add(timeout)
	for {
		n := 0
		for i := range iters {
			if iters[i] == nil {
				continue
			}
			out, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iters[i], Limit: aws.Int32(10000)})
			if err != nil {
				t.Fatalf("awstest: get records of %s: %v", name, err)
			}
			perShard[i] = append(perShard[i], out.Records...)
			iters[i] = out.NextShardIterator
		}
		for _, rs := range perShard {
			n += len(rs)
		}
		if n >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var all []ktypes.Record
	for _, rs := range perShard {
		all = append(all, rs...)
	}
	return all
}

// EventBridge is an EventBridge client on moto.
func EventBridge(t testing.TB) *eventbridge.Client { return eventbridge.NewFromConfig(Config(t)) }

// MotoSQS is an SQS client on moto (not fauxqs): the queues its
// EventBridge rules deliver to live there.
func MotoSQS(t testing.TB) *sqs.Client {
	t.Helper()
	return sqs.NewFromConfig(Config(t), func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(testenv.Require(t, "AWS_ENDPOINT_URL_EVENTBRIDGE"))
	})
}

// Secrets is a Secrets Manager client on moto.
func Secrets(t testing.TB) *secretsmanager.Client { return secretsmanager.NewFromConfig(Config(t)) }

// NewSecret stores value as a new secret (deleted after the test) and
// returns its ARN.
func NewSecret(t testing.TB, c *secretsmanager.Client, prefix, value string) string {
	t.Helper()
	name := Name(prefix)
	out, err := c.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{
		Name: aws.String(name), SecretString: aws.String(value)})
	if err != nil {
		t.Fatalf("awstest: create secret %s: %v", name, err)
	}
	t.Cleanup(func() {
		_, _ = c.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{
			SecretId: out.ARN, ForceDeleteWithoutRecovery: aws.Bool(true)})
	})
	return aws.ToString(out.ARN)
}

// PutSecret gives the secret a new value, as a rotation's step does.
func PutSecret(t testing.TB, c *secretsmanager.Client, arn, value string) {
	t.Helper()
	if _, err := c.PutSecretValue(context.Background(), &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(arn), SecretString: aws.String(value)}); err != nil {
		t.Fatalf("awstest: put secret %s: %v", arn, err)
	}
}

// Bus is an event bus on moto whose one rule sends every event from
// Source to Queue, a queue on moto's SQS.
type Bus struct {
	ARN    string
	Source string
	Queue  string // the queue URL on moto's SQS
	SQS    *sqs.Client
}

// NewBusToQueue creates a bus, a queue on moto's SQS, and a rule sending
// every event from source on the bus to the queue: the test reads what the
// bus delivered from the queue (sqstest.Drain with b.SQS).
func NewBusToQueue(t testing.TB, source string) Bus {
	t.Helper()
	ctx := context.Background()
	eb, q := EventBridge(t), MotoSQS(t)
	name := Name("bus")
	bus, err := eb.CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String(name)})
	if err != nil {
		t.Fatalf("awstest: create event bus %s: %v", name, err)
	}
	url := sqstest.NewQueue(t, q, "bus-target", nil)
	rule := name + "-all"
	if _, err := eb.PutRule(ctx, &eventbridge.PutRuleInput{
		Name: aws.String(rule), EventBusName: aws.String(name),
		EventPattern: aws.String(fmt.Sprintf(`{"source":[%q]}`, source)),
	}); err != nil {
		t.Fatalf("awstest: put rule on %s: %v", name, err)
	}
	if _, err := eb.PutTargets(ctx, &eventbridge.PutTargetsInput{
		Rule: aws.String(rule), EventBusName: aws.String(name),
		Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: aws.String(sqstest.QueueARN(t, q, url))}},
	}); err != nil {
		t.Fatalf("awstest: put target on %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = eb.RemoveTargets(ctx, &eventbridge.RemoveTargetsInput{Rule: aws.String(rule), EventBusName: aws.String(name), Ids: []string{"queue"}})
		_, _ = eb.DeleteRule(ctx, &eventbridge.DeleteRuleInput{Name: aws.String(rule), EventBusName: aws.String(name)})
		_, _ = eb.DeleteEventBus(ctx, &eventbridge.DeleteEventBusInput{Name: aws.String(name)})
	})
	return Bus{ARN: aws.ToString(bus.EventBusArn), Source: source, Queue: url, SQS: q}
}
