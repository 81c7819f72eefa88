package rie

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Error is an invocation that rie answered but that failed: the runtime's
// error document (a handler error, a panic, a failed init), a timeout, or
// a non-200 status.
type Error struct {
	// Function is the function's name.
	Function string `json:"-"`
	// Status is rie's HTTP status.
	Status int `json:"-"`
	// Type and Message are the error document's fields; Trace its
	// stackTrace as the runtime wrote it (aws-lambda-go: an array of frame
	// objects, on a panic; other runtimes: strings), so kept raw.
	Type    string          `json:"errorType"`
	Message string          `json:"errorMessage"`
	Trace   json.RawMessage `json:"stackTrace,omitempty"`
	// Body is rie's answer as it came.
	Body string `json:"-"`
}

// TimeoutType is the Type of a timed-out invocation: the errorType Lambda's
// Invoke API reports for it.
const TimeoutType = "Sandbox.Timedout"

func (e *Error) Error() string {
	if e.Status != http.StatusOK {
		return fmt.Sprintf("%s: invocation failed (HTTP %d): %s", e.Function, e.Status, e.Body)
	}
	return fmt.Sprintf("%s: function error %s: %s", e.Function, e.Type, e.Message)
}

// IsFunctionError reports whether err is an error of the function itself
// (its error document or a timeout), as Lambda's X-Amz-Function-Error
// header would say, rather than an invocation rie refused or a transport
// failure.
func IsFunctionError(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusOK
}

// Invoke sends one synchronous invocation and returns the response body.
// A failed invocation returns an *Error, with the body too. No client
// timeout: rie enforces AWS_LAMBDA_FUNCTION_TIMEOUT itself, and ctx bounds
// the wait.
func (f *Function) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	select {
	case f.turn <- struct{}{}:
		defer func() { <-f.turn }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.URL, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: invoke: %w", f.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: read response: %w", f.Name, err)
	}
	if e := answerError(resp.StatusCode, body); e != nil {
		e.Function = f.Name
		return body, e
	}
	return body, nil
}

// InvokeJSON marshals in, invokes, and unmarshals the response into out
// (skipped when out is nil).
func (f *Function) InvokeJSON(ctx context.Context, in, out any) error {
	payload, err := json.Marshal(in)
	if err != nil {
		return err
	}
	body, err := f.Invoke(ctx, payload)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s: decode response %s: %w", f.Name, body, err)
	}
	return nil
}

// answerError recognizes a failed invocation in rie's answer, or returns
// nil for a response document.
func answerError(status int, body []byte) *Error {
	if status != http.StatusOK {
		return &Error{Status: status, Body: string(body)}
	}
	// rie answers a timeout with 200 and this plain text where Lambda's
	// Invoke API would send an error document, so it is made into one.
	if bytes.HasPrefix(body, []byte("Task timed out")) {
		return &Error{Status: status, Type: TimeoutType, Message: string(body), Body: string(body)}
	}
	// rie answers a handler error with 200 and the runtime's error document
	// where Lambda would add X-Amz-Function-Error. Both keys must hold
	// strings: a handler's own output may carry one of them, or a null.
	var doc struct {
		Type    *string         `json:"errorType"`
		Message *string         `json:"errorMessage"`
		Trace   json.RawMessage `json:"stackTrace"`
	}
	if json.Unmarshal(body, &doc) != nil || doc.Type == nil || doc.Message == nil {
		return nil
	}
	return &Error{Status: status, Type: *doc.Type, Message: *doc.Message, Trace: doc.Trace, Body: string(body)}
}
