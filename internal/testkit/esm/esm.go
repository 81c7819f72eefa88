// Package esm builds the events Lambda's SQS event source mapping delivers,
// for the local driver and the tests, which play the mapping.
package esm

import (
	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Event builds the event that the SQS event source mapping would deliver
// for messages received from the queue arn. Receive the messages with
// MessageSystemAttributeNames All (the handler reads
// ApproximateReceiveCount) and MessageAttributeNames All.
func Event(arn, region string, msgs []sqstypes.Message) events.SQSEvent {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, 0, len(msgs))}
	for _, m := range msgs {
		rec := events.SQSMessage{
			MessageId:              aws.ToString(m.MessageId),
			ReceiptHandle:          aws.ToString(m.ReceiptHandle),
			Body:                   aws.ToString(m.Body),
			Md5OfBody:              aws.ToString(m.MD5OfBody),
			Md5OfMessageAttributes: aws.ToString(m.MD5OfMessageAttributes),
			Attributes:             map[string]string{},
			MessageAttributes:      map[string]events.SQSMessageAttribute{},
			EventSource:            "aws:sqs",
			EventSourceARN:         arn,
			AWSRegion:              region,
		}
		for k, v := range m.Attributes {
			rec.Attributes[k] = v
		}
		for k, v := range m.MessageAttributes {
			rec.MessageAttributes[k] = events.SQSMessageAttribute{
				StringValue:      v.StringValue,
				BinaryValue:      v.BinaryValue,
				StringListValues: v.StringListValues,
				BinaryListValues: v.BinaryListValues,
				DataType:         aws.ToString(v.DataType),
			}
		}
		ev.Records = append(ev.Records, rec)
	}
	return ev
}
