package migrateresource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"time"

	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// sendAttempts and sendBackoff pace the PUT: the pre-signed URL is S3's,
// which may answer a moment's 5xx; CloudFormation waits for the
// resource's ServiceTimeout if no answer ever lands.
const (
	sendAttempts = 3
	sendBackoff  = time.Second
)

// LogReserve is kept back from the invocation's deadline after the
// response: a ResponseURL that accepts and never answers must not take
// the time the log line and the handler's return need.
const LogReserve = time.Second

// send PUTs body to the pre-signed url as CloudFormation requires: no
// Content-Type (the URL's signature covers none, and S3 would refuse one),
// the exact Content-Length, a 200 back. Each attempt is bounded by the
// HTTP client's timeout, and all of them by the invocation's deadline
// less LogReserve.
func (s *Service) send(ctx context.Context, url string, body []byte) error {
	if url == "" {
		return fmt.Errorf("the request has no ResponseURL")
	}
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-LogReserve))
		defer cancel()
	}
	var last error
	for attempt := range sendAttempts {
		if attempt > 0 {
			if err := pass.Sleep(ctx, sendBackoff*time.Duration(attempt)); err != nil {
				return fmt.Errorf("PUT response to %s: no time left for attempt %d before the function's deadline less %s (after: %v)",
					host(url), attempt+1, LogReserve, last)
			}
		}
		if last = s.put(ctx, url, body); last == nil {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return last
}

func (s *Service) put(ctx context.Context, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		// The URL is pre-signed: its query is a credential, never logged.
		return fmt.Errorf("PUT response: the ResponseURL is not an http(s) URL")
	}
	req.Header.Del("Content-Type")
	start := time.Now()
	resp, err := s.opts.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err) {
			why := fmt.Sprintf("the HTTP client's timeout (%s)", s.opts.HTTP.Timeout)
			if ctx.Err() != nil {
				why = fmt.Sprintf("the function's deadline less %s kept for the log line", LogReserve)
			}
			return fmt.Errorf("PUT response to %s: no answer within %s, %s", host(url), time.Since(start).Round(time.Millisecond), why)
		}
		var uerr *neturl.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("PUT response to %s: %w", host(url), err)
	}
	defer resp.Body.Close()
	detail, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT response to %s: HTTP %d: %s", host(url), resp.StatusCode, bytes.TrimSpace(detail))
	}
	return nil
}

// host names a ResponseURL in messages by its host: its pre-signed query
// is a credential.
func host(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil || u.Host == "" {
		return "the ResponseURL"
	}
	return u.Scheme + "://" + u.Host
}
