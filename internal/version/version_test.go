package version

import (
	"regexp"
	"runtime/debug"
	"testing"
)

// semver is Semantic Versioning 2.0.0's own grammar, without build metadata.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

func TestNumberIsASemanticVersion(t *testing.T) {
	if !semver.MatchString(Number()) {
		t.Fatalf("VERSION holds %q, not a semantic version such as 0.1.0", Number())
	}
}

func TestCommitFromBuildInfo(t *testing.T) {
	cases := []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{name: "clean checkout", settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "false"}},
			want: "0123456789ab"},
		{name: "changed tree", settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}},
			want: "0123456789ab+dirty"},
		{name: "no VCS stamping", settings: []debug.BuildSetting{{Key: "-trimpath", Value: "true"}}, want: "unknown"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := fromBuildInfo(&debug.BuildInfo{Settings: c.settings}); got != c.want {
				t.Errorf("commit = %q, want %q", got, c.want)
			}
		})
	}
}

func TestStampedCommitWins(t *testing.T) {
	old := commit
	t.Cleanup(func() { commit = old })
	commit = "feedface"
	if got := Commit(); got != "feedface" {
		t.Errorf("Commit() = %q, want the stamped feedface", got)
	}
}
