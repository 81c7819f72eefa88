package sqstest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// loseFirstReceive is a transport whose first ReceiveMessage reaches the
// queue (which hands its messages out and hides them) but whose answer is
// lost: the SDK sees a broken connection and receives again.
type loseFirstReceive struct {
	mu   sync.Mutex
	lost bool
}

func (l *loseFirstReceive) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".ReceiveMessage") {
		return res, err
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lost && strings.Contains(string(body), "ReceiptHandle") {
		l.lost = true
		return nil, errors.New("connection reset by peer")
	}
	res.Body = io.NopCloser(strings.NewReader(string(body)))
	return res, nil
}

// Messages a receive handed out whose answer never came back are read
// within the wait, each once: Drain's receives hide them for seconds, not
// SQS's default 30.
func TestDrainReadsMessagesOfALostReceiveWithinItsWait(t *testing.T) {
	url := NewQueue(t, Client(t), "drain-lost", nil)
	entries := make([]types.SendMessageBatchRequestEntry, 10)
	for i := range entries {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(string(rune('a' + i))), MessageBody: aws.String("m")}
	}
	for range 3 {
		if _, err := Client(t).SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
			t.Fatal(err)
		}
	}
	lossy := &loseFirstReceive{}
	c := sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(testenv.Require(t, "AWS_ENDPOINT_URL_SQS")),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   &http.Client{Transport: lossy},
	})
	got := Drain(t, c, url, 30, 8*time.Second)
	if !lossy.lost {
		t.Fatal("no receive's answer was lost: the test proves nothing")
	}
	if len(got) != 30 {
		t.Errorf("drained %d messages within the wait, want all 30", len(got))
	}
}
