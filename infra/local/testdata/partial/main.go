// Command partial is the driver tests' SQS function: it fails the items
// whose body starts with "fail" (a partial batch response) and answers
// with the batch it received, so a test sees exactly what the mapping sent.
package main

import (
	"context"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
)

type response struct {
	events.SQSEventResponse
	Received events.SQSEvent `json:"received"`
}

func main() {
	lambda.Start(func(ctx context.Context, ev events.SQSEvent) (response, error) {
		r := response{Received: ev}
		for _, m := range ev.Records {
			if strings.HasPrefix(m.Body, "fail") {
				r.BatchItemFailures = append(r.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
			}
		}
		return r, nil
	})
}
