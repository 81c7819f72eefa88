package local

import (
	"context"
	"encoding/json"
	"time"
)

// Invocation is one call of a function, for the driver's observers.
type Invocation struct {
	Function string          `json:"function"`
	Start    time.Time       `json:"start"`
	Duration time.Duration   `json:"duration_ns"`
	Response json.RawMessage `json:"response,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// Observer is told about every invocation; it must not block for long.
type Observer func(Invocation)

// invoke calls f once and reports it.
func invoke(ctx context.Context, f *Function, event []byte, observe Observer) (json.RawMessage, error) {
	start := time.Now()
	resp, err := f.Invoke(ctx, event)
	inv := Invocation{Function: f.Name, Start: start, Duration: time.Since(start), Response: resp}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err() // shutting down: not the function's failure
		}
		// The body is in the error; as Response it might not even be JSON
		// (rie's "Task timed out" text), and observers marshal it.
		inv.Response, resp = nil, nil
		inv.Error = err.Error()
	}
	if observe != nil {
		observe(inv)
	}
	return resp, err
}

// Schedule plays an EventBridge Scheduler rule for f: it invokes f with
// input at once and then every interval until ctx ends.
//
// One invocation at a time, as the template's ReservedConcurrentExecutions
// 1 gives: a tick that comes while a pass still runs is dropped (the
// Ticker drops it), as Lambda would throttle it and the schedule's
// MaximumRetryAttempts 0 would not retry it.
func Schedule(ctx context.Context, f *Function, input []byte, every time.Duration, observe Observer) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		_, _ = invoke(ctx, f, input, observe)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
