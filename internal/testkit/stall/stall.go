// Package stall is the far end that never answers: an HTTP server that
// accepts every request and holds it until the client gives up or the test
// ends, for testing that a caller bounds its wait.
package stall

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Server starts a server that accepts every request and answers none; the
// requests it holds are let go, and the server closed, when the test ends.
func Server(t testing.TB) *httptest.Server {
	t.Helper()
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(done); srv.Close() })
	return srv
}
