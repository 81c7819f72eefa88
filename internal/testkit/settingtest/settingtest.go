// Package settingtest checks that a pass's constructor refuses what it
// must the one way every pass does: no database, and each bad setting
// with a *setting.Error naming the field.
package settingtest

import (
	"errors"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/setting"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Refuses checks that a pass's New, with opts, refuses a nil database
// (with the zero configuration) and then, each under its own t.Run, that
// it refuses every configuration of bad on db with a *setting.Error
// naming the field bad keys it by.
func Refuses[C, O, S any](t *testing.T, db pass.DB, bad map[string]C, newPass func(pass.DB, C, O) (S, error), opts O) {
	t.Helper()
	var zero C
	if _, err := newPass(nil, zero, opts); err == nil {
		t.Error("nil database accepted")
	}
	for field, c := range bad {
		t.Run(field, func(t *testing.T) {
			var se *setting.Error
			if _, err := newPass(db, c, opts); !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *setting.Error", err)
			}
			if se.Field != field {
				t.Errorf("the error names %s", se.Field)
			}
		})
	}
}

// Accepts checks, each under its own t.Run, that a pass's New, with
// opts, accepts every configuration of good on db.
func Accepts[C, O, S any](t *testing.T, db pass.DB, good map[string]C, newPass func(pass.DB, C, O) (S, error), opts O) {
	t.Helper()
	for name, c := range good {
		t.Run(name, func(t *testing.T) {
			if _, err := newPass(db, c, opts); err != nil {
				t.Errorf("%s refused: %v", name, err)
			}
		})
	}
}

// Defaults checks that the zero configuration's defaults, got (a pass's
// Config{}.WithDefaults()), are want field for field.
func Defaults[C comparable](t *testing.T, got, want C) {
	t.Helper()
	if got != want {
		t.Fatalf("Config{}.WithDefaults() = %+v, want %+v", got, want)
	}
}
