package target

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
)

// eventBridgeAPI is PutEvents to one bus.
type eventBridgeAPI struct {
	client *eventbridge.Client
	bus    string
	source string
}

func newEventBridge(cfg aws.Config, t Target, source string) *eventBridgeAPI {
	return &eventBridgeAPI{client: eventbridge.NewFromConfig(cfg), bus: t.ARN, source: source}
}

// size is AWS's entry-size formula: Source, DetailType and Detail in UTF-8
// bytes (no Time and no Resources are set).
func (a *eventBridgeAPI) size(m *Message) int { return len(a.source) + len(m.Type) + len(m.Body) }

func (a *eventBridgeAPI) check(m *Message) (string, string) {
	if m.Type == "" {
		return CodeMissingType, "an EventBridge entry needs a DetailType"
	}
	return "", ""
}

func (a *eventBridgeAPI) put(ctx context.Context, batch []*Message) ([]answer, error) {
	entries := make([]types.PutEventsRequestEntry, len(batch))
	for k, m := range batch {
		// The bus by ARN, so a bus in another account works as in this one.
		entries[k] = types.PutEventsRequestEntry{
			EventBusName: aws.String(a.bus),
			Source:       aws.String(a.source),
			DetailType:   aws.String(m.Type),
			Detail:       aws.String(string(m.Body)),
		}
	}
	out, err := a.client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: entries})
	if err != nil {
		return nil, err
	}
	return eventBridgeAnswers(out, len(batch)), nil
}

// eventBridgeAnswers reads PutEvents' answer: one result entry per request
// entry, in order, with an EventId or an ErrorCode.
func eventBridgeAnswers(out *eventbridge.PutEventsOutput, n int) []answer {
	return answersInOrder(n, out.Entries, func(e types.PutEventsResultEntry) (id, code, message *string) {
		return e.EventId, e.ErrorCode, e.ErrorMessage
	})
}
