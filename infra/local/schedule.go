package local

import (
	"context"
	"encoding/json"
	"sync"
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

// maxEventAge is the schedules' MaximumEventAgeInSeconds: an invocation
// that finds every execution environment busy waits this long for one (as
// Lambda's asynchronous queue holds a throttled event), then is dropped.
const maxEventAge = 60 * time.Second

// Schedule plays an EventBridge Scheduler schedule for one function: at
// once and then every interval until ctx ends, it invokes the function with
// input, asynchronously, as Scheduler does. fns are the function's
// execution environments, as many as its reserved concurrency: an
// invocation runs on a free one, so the fill's watching pass and the next
// minute's invocation run side by side for the hand-over, and a further
// one waits, as Lambda would throttle it.
func Schedule(ctx context.Context, fns []*Function, input []byte, every time.Duration, observe Observer) {
	free := make(chan *Function, len(fns))
	for _, f := range fns {
		free <- f
	}
	var running sync.WaitGroup
	defer running.Wait()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		running.Go(func() {
			wait := time.NewTimer(maxEventAge)
			defer wait.Stop()
			select {
			case f := <-free:
				_, _ = invoke(ctx, f, input, observe)
				free <- f
			case <-wait.C:
				if observe != nil {
					observe(Invocation{Function: fns[0].Name, Start: time.Now(), Error: "throttled: every execution environment stayed busy for the event's maximum age"})
				}
			case <-ctx.Done():
			}
		})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
