package local

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"unsafe"
)

// StatusLine shows a live status: rewritten in place with \r on a
// terminal, one plain line per update otherwise (CI logs, pipes), where
// \r would pile every update into one unreadable line.
type StatusLine struct {
	w     io.Writer
	tty   bool
	width int
	last  int
}

// NewStatusLine writes to f.
func NewStatusLine(f *os.File) *StatusLine {
	st, err := f.Stat()
	s := &StatusLine{w: f, tty: err == nil && st.Mode()&os.ModeCharDevice != 0}
	if s.tty {
		s.width = termWidth(f)
	}
	return s
}

// termWidth is the terminal's column count, 0 when unknown. A line longer
// than the terminal wraps, and \r then rewrites only its last row, so the
// in-place status is cut to fit.
func termWidth(f *os.File) int {
	var ws struct{ Row, Col, X, Y uint16 }
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), uintptr(syscall.TIOCGWINSZ), uintptr(unsafe.Pointer(&ws)))
	if errno != 0 {
		return 0
	}
	return int(ws.Col)
}

// Show replaces the status with line.
func (s *StatusLine) Show(line string) {
	if !s.tty {
		fmt.Fprintln(s.w, line)
		return
	}
	if s.width > 1 && len(line) >= s.width {
		line = line[:s.width-1]
	}
	// Pad over the rest of a longer previous line.
	pad := max(0, s.last-len(line))
	fmt.Fprint(s.w, "\r"+line+strings.Repeat(" ", pad))
	s.last = len(line)
}

// Done ends an in-place status so what follows starts on a fresh line.
func (s *StatusLine) Done() {
	if s.tty && s.last > 0 {
		fmt.Fprintln(s.w)
		s.last = 0
	}
}

// Check is one line of a verdict.
type Check struct {
	Name   string
	OK     bool
	Detail string
}

// PrintVerdict writes the checks as a table and reports whether all passed.
func PrintVerdict(w io.Writer, checks []Check) bool {
	width := 0
	for _, c := range checks {
		width = max(width, len(c.Name))
	}
	all := true
	for _, c := range checks {
		mark := "PASS"
		if !c.OK {
			mark, all = "FAIL", false
		}
		fmt.Fprintf(w, "  %s  %-*s  %s\n", mark, width, c.Name, c.Detail)
	}
	return all
}
