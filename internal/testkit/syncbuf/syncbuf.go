// Package syncbuf is a bytes.Buffer safe for concurrent writers: where a
// test collects the log lines of code running in other goroutines, or the
// output of a subprocess.
package syncbuf

import (
	"bytes"
	"sync"
	"time"
)

// Buffer is safe for concurrent use. The zero value is empty and ready.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Await waits until cond holds for what was written so far, or wait
// passes, and returns what was written then. A subprocess's output reaches
// the buffer through a pipe and a copying goroutine, so a line written
// before the process answered may land a moment after the answer: a test
// waits for the line instead of reading once, then asserts on what it got.
func (b *Buffer) Await(cond func(written string) bool, wait time.Duration) string {
	deadline := time.Now().Add(wait)
	for {
		written := b.String()
		if cond(written) || time.Now().After(deadline) {
			return written
		}
		time.Sleep(5 * time.Millisecond)
	}
}
