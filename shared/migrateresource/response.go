package migrateresource

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/budget"
)

// sendAttempts and sendBackoff pace the PUT: the pre-signed URL is S3's,
// which may answer a moment's 5xx; CloudFormation waits for the
// resource's ServiceTimeout if no answer ever lands.
const (
	sendAttempts = 3
	sendBackoff  = time.Second
)

// send PUTs body to the pre-signed url as CloudFormation requires: no
// Content-Type (the URL's signature covers none, and S3 would refuse one),
// the exact Content-Length, a 200 back.
func (s *Service) send(ctx context.Context, url string, body []byte) error {
	if url == "" {
		return fmt.Errorf("the request has no ResponseURL")
	}
	var last error
	for attempt := range sendAttempts {
		if attempt > 0 {
			if err := budget.Sleep(ctx, sendBackoff*time.Duration(attempt)); err != nil {
				return fmt.Errorf("%w (after: %v)", err, last)
			}
		}
		if last = s.put(ctx, url, body); last == nil {
			return nil
		}
	}
	return last
}

func (s *Service) put(ctx context.Context, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("PUT response: %w", err)
	}
	req.Header.Del("Content-Type")
	resp, err := s.opts.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("PUT response: %w", err)
	}
	defer resp.Body.Close()
	detail, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT response: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(detail))
	}
	return nil
}
