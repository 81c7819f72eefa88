package target

import (
	"context"
	"errors"
	"strings"

	"github.com/aws/smithy-go"
)

// Status is what became of one message in a Send.
type Status int

const (
	// Sent: the target accepted the message.
	Sent Status = iota + 1
	// Transient: not accepted, and not for anything in the message itself
	// (throttling, an internal error, the service unavailable, a call that
	// timed out or never reached the service, but also a missing
	// permission or target): sending it again later may succeed.
	Transient
	// Permanent: the target refused the message itself (too large, invalid
	// content, an invalid parameter), or it breaks a limit the target can
	// never take and was not sent; sending it again as it is will fail again.
	Permanent
	// Held: not sent in this Send because an earlier message of its group
	// failed (Outcome.Behind), so that a group's messages reach an ordered
	// target (FIFO, Kinesis) in order.
	Held
)

func (s Status) String() string {
	switch s {
	case Sent:
		return "sent"
	case Transient:
		return "transient"
	case Permanent:
		return "permanent"
	case Held:
		return "held"
	}
	return "unknown"
}

// The codes of the failures the Sender decides itself, without a call.
const (
	// CodeTooLarge: the message is larger than Limits.EntryBytes.
	CodeTooLarge = "TooLarge"
	// CodeInvalidGroup: a FIFO message without a group, or a group (FIFO
	// MessageGroupId, Kinesis partition key) the service would refuse.
	CodeInvalidGroup = "InvalidGroup"
	// CodeInvalidDedupID: a FIFO message without a deduplication id, or one
	// the service would refuse.
	CodeInvalidDedupID = "InvalidDedupID"
	// CodeMissingType: an EventBridge message without a DetailType.
	CodeMissingType = "MissingDetailType"
	// CodeNotAcknowledged: the call succeeded but its answer did not
	// mention the message, so whether it arrived is unknown.
	CodeNotAcknowledged = "NotAcknowledged"
	// CodeDeadlineExceeded, CodeCanceled: the ctx ended the call, or ended
	// before the call was made.
	CodeDeadlineExceeded = "DeadlineExceeded"
	CodeCanceled         = "Canceled"
	// CodeRequestError: the call failed without an answer from the service
	// (connection refused or reset, DNS, TLS).
	CodeRequestError = "RequestError"
)

// permanentCodes are the services' error codes that blame the message's
// content or shape. Only these make a failure permanent: a caller parks a
// permanently failed event, and parking must never follow from a fault of
// the deployment (a missing permission, a deleted queue, a KMS key
// disabled) that would park every event. Those, and any code not listed,
// are transient: the caller holds its position and its lag alarm fires.
var permanentCodes = map[string]bool{
	// SQS (per entry and per call).
	"InvalidMessageContents": true, // a character outside SQS's allowed set
	"InvalidParameterValue":  true, // e.g. longer than the queue's MaximumMessageSize
	"MissingParameter":       true,
	"BatchRequestTooLong":    true,
	"MessageTooLong":         true,
	// SNS.
	"InvalidParameter":               true, // e.g. "Message too long"
	"InvalidParameterException":      true,
	"InvalidParameterValueException": true,
	// EventBridge.
	"InvalidArgument": true,
	"MalformedDetail": true, // Detail is not a JSON object
	// Kinesis (whole call only: its per-record codes are all transient).
	"InvalidArgumentException": true,
	// Several services, for a request that breaks the API's constraints.
	"ValidationException":   true,
	"ValidationError":       true,
	"RequestEntityTooLarge": true,
}

// classify is the Status of a failure with the service's error code.
func classify(code string) Status {
	// SQS's query-compatible codes may carry a namespace.
	code = strings.TrimPrefix(code, "AWS.SimpleQueueService.")
	if i := strings.LastIndexByte(code, '#'); i >= 0 {
		code = code[i+1:]
	}
	if permanentCodes[code] {
		return Permanent
	}
	return Transient
}

// callError is the code, message and Status of a call that failed as a
// whole.
func callError(err error) (code, message string, status Status) {
	var ae smithy.APIError
	switch {
	case errors.As(err, &ae):
		return ae.ErrorCode(), ae.ErrorMessage(), classify(ae.ErrorCode())
	case errors.Is(err, context.DeadlineExceeded):
		return CodeDeadlineExceeded, err.Error(), Transient
	case errors.Is(err, context.Canceled):
		return CodeCanceled, err.Error(), Transient
	}
	return CodeRequestError, err.Error(), Transient
}
