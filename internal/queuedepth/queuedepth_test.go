package queuedepth_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkeeper/outboxkeeper/internal/queuedepth"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// Against fauxqs: three messages sent and one received read as two visible
// and one in flight, three in all.
func TestDepthCountsVisibleAndInFlightMessages(t *testing.T) {
	t.Parallel()
	c := sqstest.Client(t)
	ctx := testenv.Context(t, 20*time.Second)
	url := sqstest.NewQueue(t, c, "depth", map[string]string{"VisibilityTimeout": "60"})
	for _, body := range []string{"a", "b", "c"} {
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 1}); err != nil {
		t.Fatal(err)
	}

	d, err := queuedepth.Of(ctx, c, url)
	if err != nil {
		t.Fatal(err)
	}
	if d.Visible != 2 {
		t.Errorf("visible = %d, want 2", d.Visible)
	}
	if d.InFlight != 1 {
		t.Errorf("in flight = %d, want 1", d.InFlight)
	}
	if d.Total() != 3 {
		t.Errorf("total = %d, want 3", d.Total())
	}
	if d.URL != url {
		t.Errorf("url = %q, want %q", d.URL, url)
	}
}

// A queue that does not exist is an error that names it.
func TestDepthOfAMissingQueueNamesIt(t *testing.T) {
	t.Parallel()
	c := sqstest.Client(t)
	url := sqstest.NewQueue(t, c, "gone", nil) + "-missing"
	_, err := queuedepth.Of(context.Background(), c, url)
	if err == nil || !strings.Contains(err.Error(), url) {
		t.Errorf("err = %v, want one naming %s", err, url)
	}
}
