package syncbuf

import (
	"strings"
	"testing"
	"time"
)

func TestAwaitWaitsForALineWrittenAfterTheCall(t *testing.T) {
	var b Buffer
	_, _ = b.Write([]byte("INIT START\n"))
	go func() {
		time.Sleep(30 * time.Millisecond)
		_, _ = b.Write([]byte("INIT REPORT\n"))
	}()
	got := b.Await(func(s string) bool { return strings.Contains(s, "INIT REPORT") }, 5*time.Second)
	if !strings.Contains(got, "INIT REPORT") {
		t.Errorf("Await returned %q, before the line written 30 ms after the call", got)
	}
}

func TestAwaitReturnsWhatWasWrittenWhenTheWaitEnds(t *testing.T) {
	var b Buffer
	_, _ = b.Write([]byte("START\n"))
	got := b.Await(func(string) bool { return false }, 20*time.Millisecond)
	if got != "START\n" {
		t.Errorf("Await = %q, want what was written, once the wait ended", got)
	}
}
