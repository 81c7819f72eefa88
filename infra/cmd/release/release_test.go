package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/repo"
	"github.com/outboxkeeper/outboxkeeper/internal/version"
)

func root(t *testing.T) string {
	t.Helper()
	r, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sarMetadata reads a template's Serverless Application Repository
// metadata, whichever form (short tags or long) the template is in.
func sarMetadata(t *testing.T, text []byte) map[string]any {
	t.Helper()
	var doc struct {
		Metadata map[string]map[string]any `yaml:"Metadata"`
	}
	if err := yaml.Unmarshal(text, &doc); err != nil {
		t.Fatal(err)
	}
	m := doc.Metadata[sarKey]
	if m == nil {
		t.Fatalf("no Metadata.%s", sarKey)
	}
	return m
}

// verifySums recomputes every line of dir/SHA256SUMS, and says which
// files it names.
func verifySums(t *testing.T, dir string) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	named := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q is not '<sha256>  <file>'", sc.Text())
		}
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(b)
		if hex.EncodeToString(h[:]) != sum {
			t.Errorf("SHA256SUMS: %s does not match its file", name)
		}
		named[name] = true
	}
	return named
}

// The release build of the host's CLI runs and says its version and the
// stamped commit; the SAM part carries the completed metadata and the
// files it points at; every file is in SHA256SUMS, which verifies (with
// sha256sum -c too, as the README tells a user to check). A second target
// shows the cross-build; make release builds all four the same way.
func TestReleaseBuildsVerifiableArtifacts(t *testing.T) {
	out := filepath.Join(t.TempDir(), "dist")
	samBuild := t.TempDir()
	r := root(t)
	// A stand-in for `sam build` output: the source template and one
	// function directory (check.sh packages the real build).
	tpl, err := os.ReadFile(filepath.Join(r, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(samBuild, "template.yaml"), tpl, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(samBuild, "FillFunction"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(samBuild, "FillFunction", "bootstrap"), []byte("\x7fELF stand-in"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The host's build, to run it, and one for another OS and
	// architecture, to show the cross-build works.
	host := runtime.GOOS + "/" + runtime.GOARCH
	cross := "darwin/arm64"
	if host == cross {
		cross = "linux/amd64"
	}
	var log bytes.Buffer
	err = run(context.Background(), Options{Out: out, Targets: []string{host, cross}, SAMBuild: samBuild, Commit: "c0ffee1234", Root: r, Log: &log})
	if err != nil {
		t.Fatalf("release: %v\n%s", err, log.String())
	}

	cli := filepath.Join(out, CLIName(host))
	got, err := exec.Command(cli, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", cli, err)
	}
	if want := "outboxkeeper " + version.Number() + " (commit c0ffee1234,"; !strings.HasPrefix(string(got), want) {
		t.Errorf("--version printed %q, want it to start with %q", got, want)
	}

	meta := sarMetadata(t, mustRead(t, filepath.Join(out, "sam", "template.yaml")))
	if meta["SemanticVersion"] != version.Number() {
		t.Errorf("SemanticVersion %v, want VERSION's %s", meta["SemanticVersion"], version.Number())
	}
	if meta["SourceCodeUrl"] != Repository+"/tree/v"+version.Number() {
		t.Errorf("SourceCodeUrl %v, want the tag v%s", meta["SourceCodeUrl"], version.Number())
	}
	for _, f := range []string{"LICENSE", "README.md"} {
		if !bytes.Equal(mustRead(t, filepath.Join(out, "sam", f)), mustRead(t, filepath.Join(r, f))) {
			t.Errorf("sam/%s is not the repository's %s", f, f)
		}
	}

	if b := mustRead(t, filepath.Join(out, CLIName(cross))); !bytes.Contains(b, []byte("c0ffee1234")) {
		t.Errorf("the %s build does not carry the stamped commit", cross)
	}
	named := verifySums(t, out)
	for _, f := range []string{CLIName(host), CLIName(cross), "sam/template.yaml", "sam/LICENSE", "sam/README.md", "sam/FillFunction/bootstrap"} {
		if !named[f] {
			t.Errorf("SHA256SUMS does not name %s", f)
		}
	}
	cmd := exec.Command("sha256sum", "--quiet", "-c", "SHA256SUMS")
	cmd.Dir = out
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, b)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// releaseHeading is a Keep a Changelog version heading.
var releaseHeading = regexp.MustCompile(`^## \[(\d+\.\d+\.\d+[^\]]*)\] - (\d{4}-\d{2}-\d{2})$`)

// The version is written once (internal/version/VERSION): the CLI prints
// it, the release metadata carries it, and the CHANGELOG's newest release
// is it, below [Unreleased].
func TestVersionAgreesWithMetadataAndChangelog(t *testing.T) {
	r := root(t)
	out, err := CompleteMetadata(mustRead(t, filepath.Join(r, "template.yaml")), version.Number())
	if err != nil {
		t.Fatal(err)
	}
	if v := sarMetadata(t, out)["SemanticVersion"]; v != version.Number() {
		t.Errorf("the release template's SemanticVersion is %v, VERSION says %s", v, version.Number())
	}
	if _, ok := sarMetadata(t, mustRead(t, filepath.Join(r, "template.yaml")))["SemanticVersion"]; ok {
		t.Error("template.yaml writes a SemanticVersion of its own: the release sets it from VERSION")
	}

	var headings []string
	sc := bufio.NewScanner(bytes.NewReader(mustRead(t, filepath.Join(r, "CHANGELOG.md"))))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "## ") {
			headings = append(headings, sc.Text())
		}
	}
	if len(headings) < 2 || headings[0] != "## [Unreleased]" {
		t.Fatalf("CHANGELOG.md headings %q: want [Unreleased] first, then the releases", headings)
	}
	m := releaseHeading.FindStringSubmatch(headings[1])
	if m == nil {
		t.Fatalf("CHANGELOG.md: %q is not '## [X.Y.Z] - YYYY-MM-DD'", headings[1])
	}
	if m[1] != version.Number() {
		t.Errorf("the newest release in CHANGELOG.md is %s, VERSION says %s", m[1], version.Number())
	}
}

func TestCheckMetadataRefusesWhatTheRepositoryWould(t *testing.T) {
	good := func() map[string]any {
		return map[string]any{"Name": "outboxkeeper", "Description": "d", "Author": "outboxkeeper", "SpdxLicenseId": "Apache-2.0",
			"LicenseUrl": "LICENSE", "ReadmeUrl": "README.md", "SemanticVersion": "0.1.0", "SourceCodeUrl": "https://example.com/x",
			"Labels": []any{"postgresql"}}
	}
	if p := CheckMetadata(good()); len(p) != 0 {
		t.Fatalf("valid metadata refused: %v", p)
	}
	cases := []struct {
		name, key string
		value     any
		want      string
	}{
		{"name with a space", "Name", "outbox keeper", "Name"},
		{"upper-case author", "Author", "Outboxkeeper", "Author"},
		{"author with a double hyphen", "Author", "outbox--keeper", "Author"},
		{"long description", "Description", strings.Repeat("x", 257), "Description"},
		{"no version", "SemanticVersion", "", "SemanticVersion"},
		{"v-prefixed version", "SemanticVersion", "v0.1.0", "SemanticVersion"},
		{"label with a space", "Labels", []any{"transactional outbox"}, "Label"},
		{"eleven labels", "Labels", []any{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"}, "11 Labels"},
		{"plain-http source", "SourceCodeUrl", "http://example.com", "SourceCodeUrl"},
		{"no readme", "ReadmeUrl", "", "ReadmeUrl"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := good()
			m[c.key] = c.value
			p := CheckMetadata(m)
			if len(p) != 1 || !strings.Contains(p[0], c.want) {
				t.Errorf("problems %q, want one naming %s", p, c.want)
			}
		})
	}
}
