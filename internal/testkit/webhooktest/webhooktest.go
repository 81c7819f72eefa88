// Package webhooktest is a real HTTPS webhook receiver for the deliver
// function's tests: a local server with a certificate made for the test by
// its own CA (testcluster), whose bundle the deliver function is given
// (DELIVER_CA_BUNDLE) as a deployment with a private CA would be. It
// records every request it gets and answers as the test says.
package webhooktest

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testcluster"
)

// Request is one request the receiver got.
type Request struct {
	Header http.Header
	Body   []byte
}

// Receiver is a running HTTPS webhook receiver.
type Receiver struct {
	// URL is its base URL, https://localhost:PORT.
	URL string
	// CAFile is the PEM file of the CA its certificate chains to.
	CAFile string
	srv    *httptest.Server

	mu       sync.Mutex
	requests []Request
	answer   func(r Request, w http.ResponseWriter)
}

// Start starts a receiver that answers 204 until told otherwise.
func Start(t testing.TB) *Receiver {
	t.Helper()
	ca := testcluster.NewCA(t, "webhooktest CA")
	sc := ca.Issue(t, "localhost", "127.0.0.1")
	cert, err := tls.X509KeyPair(sc.CertPEM, sc.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	r := &Receiver{CAFile: caFile}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	r.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	r.srv.StartTLS()
	t.Cleanup(r.srv.Close)
	_, port, _ := splitPort(r.srv.URL)
	r.URL = "https://localhost:" + port
	return r
}

func splitPort(u string) (string, string, error) {
	i := len(u) - 1
	for i >= 0 && u[i] != ':' {
		i--
	}
	return u[:i], u[i+1:], nil
}

// Answer makes fn answer every request from now on (it may hijack, sleep
// or write any status); the request is recorded first.
func (r *Receiver) Answer(fn func(req Request, w http.ResponseWriter)) {
	r.mu.Lock()
	r.answer = fn
	r.mu.Unlock()
}

// Status makes every answer code.
func (r *Receiver) Status(code int) {
	r.Answer(func(_ Request, w http.ResponseWriter) { w.WriteHeader(code) })
}

// LoseFirstAnswer makes the first request's answer be lost (the handler
// aborts, the connection closes with no response: the receiver took it,
// the sender cannot know) and every later one answer 200.
func (r *Receiver) LoseFirstAnswer() {
	var mu sync.Mutex
	calls := 0
	r.Answer(func(_ Request, w http.ResponseWriter) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(http.StatusOK)
	})
}

// Hang makes every answer wait until the test ends (a minute at most): a
// webhook that never answers within any budget a test gives. Called after
// Start, its cleanup frees the waiting handlers before the server closes.
func (r *Receiver) Hang(t testing.TB) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	r.Answer(func(_ Request, w http.ResponseWriter) {
		select {
		case <-release:
		case <-time.After(time.Minute):
		}
	})
}

func (r *Receiver) serve(w http.ResponseWriter, hr *http.Request) {
	body, _ := io.ReadAll(hr.Body)
	req := Request{Header: hr.Header.Clone(), Body: body}
	r.mu.Lock()
	r.requests = append(r.requests, req)
	answer := r.answer
	r.mu.Unlock()
	if answer == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	answer(req, w)
}

// Requests is every request so far, in the order they came.
func (r *Receiver) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.requests...)
}
