package target

import (
	"errors"
	"strings"
	"testing"
)

func TestParseReadsEachKindOfTarget(t *testing.T) {
	cases := []struct {
		in   string
		want Target
	}{
		{"arn:aws:events:eu-west-1:123456789012:event-bus/orders", Target{
			Kind: EventBridge, ARN: "arn:aws:events:eu-west-1:123456789012:event-bus/orders",
			Partition: "aws", Region: "eu-west-1", Account: "123456789012", Name: "orders"}},
		{"arn:aws:sns:us-east-1:123456789012:orders", Target{
			Kind: SNS, ARN: "arn:aws:sns:us-east-1:123456789012:orders",
			Partition: "aws", Region: "us-east-1", Account: "123456789012", Name: "orders"}},
		{"arn:aws:sns:us-east-1:123456789012:orders.fifo", Target{
			Kind: SNS, ARN: "arn:aws:sns:us-east-1:123456789012:orders.fifo",
			Partition: "aws", Region: "us-east-1", Account: "123456789012", Name: "orders.fifo", FIFO: true}},
		{"arn:aws:sqs:us-east-1:123456789012:orders", Target{
			Kind: SQS, ARN: "arn:aws:sqs:us-east-1:123456789012:orders",
			Partition: "aws", Region: "us-east-1", Account: "123456789012", Name: "orders",
			URL: "https://sqs.us-east-1.amazonaws.com/123456789012/orders"}},
		{"arn:aws-cn:sqs:cn-north-1:123456789012:orders.fifo", Target{
			Kind: SQS, ARN: "arn:aws-cn:sqs:cn-north-1:123456789012:orders.fifo",
			Partition: "aws-cn", Region: "cn-north-1", Account: "123456789012", Name: "orders.fifo",
			URL: "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/orders.fifo", FIFO: true}},
		{"https://sqs.eu-central-1.amazonaws.com/123456789012/orders.fifo", Target{
			Kind: SQS, ARN: "arn:aws:sqs:eu-central-1:123456789012:orders.fifo",
			Partition: "aws", Region: "eu-central-1", Account: "123456789012", Name: "orders.fifo",
			URL: "https://sqs.eu-central-1.amazonaws.com/123456789012/orders.fifo", FIFO: true}},
		{"https://eu-west-1.queue.amazonaws.com/123456789012/orders", Target{
			Kind: SQS, ARN: "arn:aws:sqs:eu-west-1:123456789012:orders",
			Partition: "aws", Region: "eu-west-1", Account: "123456789012", Name: "orders",
			URL: "https://eu-west-1.queue.amazonaws.com/123456789012/orders"}},
		{"http://sqs.us-east-1.localhost:59324/000000000000/q", Target{
			Kind: SQS, ARN: "arn:aws:sqs:us-east-1:000000000000:q",
			Partition: "aws", Region: "us-east-1", Account: "000000000000", Name: "q",
			URL: "http://sqs.us-east-1.localhost:59324/000000000000/q"}},
		{"http://127.0.0.1:4566/000000000000/q", Target{
			Kind: SQS, Account: "000000000000", Name: "q", URL: "http://127.0.0.1:4566/000000000000/q"}},
		{"arn:aws:kinesis:ap-southeast-2:123456789012:stream/clicks", Target{
			Kind: Kinesis, ARN: "arn:aws:kinesis:ap-southeast-2:123456789012:stream/clicks",
			Partition: "aws", Region: "ap-southeast-2", Account: "123456789012", Name: "clicks"}},
		{"  arn:aws-us-gov:events:us-gov-west-1:123456789012:event-bus/default\n", Target{
			Kind: EventBridge, ARN: "arn:aws-us-gov:events:us-gov-west-1:123456789012:event-bus/default",
			Partition: "aws-us-gov", Region: "us-gov-west-1", Account: "123456789012", Name: "default"}},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := Parse(c.in)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got != c.want {
				t.Errorf("Parse = %+v\nwant    %+v", got, c.want)
			}
		})
	}
}

func TestParseRefusesWhatIsNoTargetNamingTheValue(t *testing.T) {
	cases := []struct{ in, says string }{
		{"", "empty"},
		{"orders", "neither an ARN"},
		{"arn:aws:s3:::bucket", "region"},
		{"arn:aws:s3:us-east-1:123456789012:bucket", `unknown kind of target "s3"`},
		{"arn:aws:lambda:us-east-1:123456789012:function:f", `unknown kind of target "lambda"`},
		{"arn:aws:sqs:us-east-1:123456789012", "malformed ARN"},
		{"arn:aws:sqs:useast1:123456789012:q", `region "useast1"`},
		{"arn:aws:sqs:us-east-1:12345:q", `account "12345"`},
		{"arn:nope:sqs:us-east-1:123456789012:q", `partition "nope"`},
		{"arn:aws:sqs:us-east-1:123456789012:bad name", "malformed SQS queue name"},
		{"arn:aws:sqs:us-east-1:123456789012:" + strings.Repeat("q", 81), "malformed SQS queue name"},
		{"arn:aws-iso:sqs:us-iso-east-1:123456789012:q", "give the queue URL instead"},
		{"arn:aws:sns:us-east-1:123456789012:orders:5f2c1d1e-0000-0000-0000-000000000000", "malformed SNS topic name"},
		{"arn:aws:events:us-east-1:123456789012:rule/r", "not an event bus's"},
		{"arn:aws:events:us-east-1:123456789012:event-bus/", "malformed event bus name"},
		{"arn:aws:kinesis:us-east-1:123456789012:stream/s/consumer/c:1", "malformed Kinesis stream name"},
		{"arn:aws:kinesis:us-east-1:123456789012:deliverystream/d", "not a stream's"},
		{"https://sqs.us-east-1.amazonaws.com/q", "not an SQS queue URL"},
		{"https://sqs.us-east-1.amazonaws.com/123456789012/q?x=1", "malformed SQS queue URL"},
		{"https://sqs.us-east-1.amazonaws.com/abc/q", `account "abc"`},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			_, err := Parse(c.in)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) error = %v, want a *ParseError", c.in, err)
			}
			if pe.Value != c.in {
				t.Errorf("ParseError.Value = %q, want the value given %q", pe.Value, c.in)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("error %q does not say %q", err, c.says)
			}
			if c.in != "" && !strings.Contains(err.Error(), c.in) {
				t.Errorf("error %q does not name the value", err)
			}
		})
	}
}
