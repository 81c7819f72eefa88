// Package version says which outboxkeeper this binary is: the semantic
// version, from the VERSION file beside this one (the only place it is
// written: the CLI, the release's Serverless Application Repository
// metadata and the CHANGELOG check all read it), and the commit it was
// built from.
package version

import (
	_ "embed"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

//go:embed VERSION
var file string

// commit is set by the release build:
//
//	-ldflags "-X github.com/outboxkeeper/outboxkeeper/internal/version.commit=<sha>"
var commit string

// Number is the semantic version without a leading v, e.g. "0.1.0".
func Number() string { return strings.TrimSpace(file) }

// Commit is the commit the binary was built from: the one the release
// build stamped, else the one the go command recorded (a build inside a
// checkout with VCS stamping; "+dirty" when the tree had changes), else
// "unknown" (go run with -buildvcs=false, go install of a module version).
func Commit() string {
	if commit != "" {
		return commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return fromBuildInfo(info)
}

// fromBuildInfo reads the commit out of the go command's build settings.
func fromBuildInfo(info *debug.BuildInfo) string {
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "unknown"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "+dirty"
	}
	return rev
}

// String is the one line `outboxkeeper --version` prints.
func String() string {
	return fmt.Sprintf("outboxkeeper %s (commit %s, %s, %s/%s)", Number(), Commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
