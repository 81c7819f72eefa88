// Package setting is the error a pass's Config validation returns. It names
// the field, so the environment loader (shared/config) can name the
// variable the field came from, and a bad deployment fails at init saying
// which variable to fix.
package setting

import (
	"fmt"
	"time"
)

// MaxPassBudget bounds every *_PASS_BUDGET: Lambda's longest timeout. A
// budget above it is a typo (720h), which no invocation could ever spend.
const MaxPassBudget = 15 * time.Minute

// Error is one unusable setting.
type Error struct {
	// Pass is the package that refused it: "fill", "sweep", ...
	Pass string
	// Field is the Config field, as spelled in Go.
	Field string
	// Value is the refused value, printed with %v.
	Value any
	// Reason says what is accepted.
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s %v: %s", e.Pass, e.Field, e.Value, e.Reason)
}

// Checker collects the first failure, so a validate method reads as a
// list of rules.
type Checker struct {
	Pass string
	err  error
}

// Check records a failure of field when ok is false and nothing failed yet.
func (c *Checker) Check(ok bool, field string, value any, reason string) {
	if !ok && c.err == nil {
		c.err = &Error{Pass: c.Pass, Field: field, Value: value, Reason: reason}
	}
}

// Err is the first failure, or nil.
func (c *Checker) Err() error { return c.err }
