// Package syncbuf is a bytes.Buffer safe for concurrent writers: where a
// test collects the log lines of code running in other goroutines, or the
// output of a subprocess.
package syncbuf

import (
	"bytes"
	"sync"
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
