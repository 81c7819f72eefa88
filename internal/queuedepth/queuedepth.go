// Package queuedepth reads what an SQS queue holds, for the operator CLI's
// status and for the local stack's verdicts: one GetQueueAttributes call.
package queuedepth

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Depth is what SQS says a queue holds: visible messages, and those
// received and not yet deleted (in flight). Both are SQS's approximations.
type Depth struct {
	URL      string `json:"url"`
	Visible  int    `json:"visible"`
	InFlight int    `json:"in_flight"`
}

// Total is every message the queue still holds, visible or in flight.
func (d Depth) Total() int { return d.Visible + d.InFlight }

// Attributes is the one call Of makes, so a caller can hand it a narrow
// client.
type Attributes interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// Of reads the depth of the queue at url.
func Of(ctx context.Context, c Attributes, url string) (Depth, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		return Depth{}, fmt.Errorf("depth of %s: %w", url, err)
	}
	d := Depth{URL: url}
	// SQS answers every attribute asked for; a missing or odd one reads as 0.
	d.Visible, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	d.InFlight, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return d, nil
}
