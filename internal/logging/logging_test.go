package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

type passResult struct {
	Zebra   int    `json:"zebra"`
	Alpha   string `json:"alpha"`
	XID     uint64 `json:"xid"`
	Skipped int    `json:"skipped,omitempty"`
}

func logged(t *testing.T, v any) string {
	t.Helper()
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("pass", slog.Any("", JSONValue(v)))
	return buf.String()
}

func TestJSONValueKeepsTheStructsFieldOrder(t *testing.T) {
	line := logged(t, passResult{Zebra: 1, Alpha: "a", XID: 7})
	if z, a := strings.Index(line, `"zebra"`), strings.Index(line, `"alpha"`); z < 0 || a < z {
		t.Errorf("zebra should come before alpha, as declared: %s", line)
	}
}

func TestJSONValueKeepsLargeIntegersExact(t *testing.T) {
	line := logged(t, passResult{XID: 1<<62 + 1})
	if !strings.Contains(line, `"xid":4611686018427387905`) {
		t.Errorf("xid rounded or reformatted: %s", line)
	}
}

func TestJSONValueInlinesTheFields(t *testing.T) {
	line := logged(t, passResult{Zebra: 3})
	if !strings.Contains(line, `"msg":"pass","zebra":3,`) {
		t.Errorf("fields not inlined after the message: %s", line)
	}
}

func TestJSONValueLeavesOutOmittedFields(t *testing.T) {
	line := logged(t, passResult{})
	if strings.Contains(line, `"skipped"`) {
		t.Errorf("omitempty field logged: %s", line)
	}
}
