// Command release builds what a release ships (make release):
//
//   - the outboxkeeper CLI for each -targets GOOS/GOARCH, statically linked,
//     stamped with the commit, named outboxkeeper-<version>-<os>-<arch>;
//   - with -sam-build, a `sam build` output turned into what `sam package`
//     and `sam publish` need: the template with its Serverless Application
//     Repository metadata completed (SemanticVersion, the source at the
//     release's tag) and the LICENSE and README.md it points at, beside the
//     five bootstraps;
//   - SHA256SUMS over every file, in `sha256sum -c` format.
//
// The version is internal/version's VERSION file, never a flag: the CLI,
// the metadata and the CHANGELOG check read that one place.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
	"gopkg.in/yaml.v3"

	"github.com/outboxkeeper/outboxkeeper/internal/version"
)

// Targets are the platforms a release ships the CLI for.
var Targets = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// Repository is where the source lives; the metadata's SourceCodeUrl is
// its tree at the release's tag.
const Repository = "https://github.com/outboxkeeper/outboxkeeper"

func main() {
	out := flag.String("out", ".local/release", "the directory to write the release into (emptied first)")
	targets := flag.String("targets", strings.Join(Targets, ","), "comma-separated GOOS/GOARCH list of CLI builds")
	samBuild := flag.String("sam-build", "", "a `sam build` output directory to package as OUT/sam (empty: no SAM artifacts)")
	commit := flag.String("commit", "", "the commit to stamp (default: git rev-parse HEAD, +dirty when the tree has changes)")
	flag.Parse()
	if err := run(context.Background(), Options{Out: *out, Targets: split(*targets), SAMBuild: *samBuild, Commit: *commit}); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Options say what one run builds.
type Options struct {
	Out      string
	Targets  []string
	SAMBuild string
	Commit   string
	// Root is the repository root (default: the working directory).
	Root string
	// Log receives one line per artifact (default: stderr).
	Log io.Writer
}

func run(ctx context.Context, o Options) error {
	if o.Root == "" {
		o.Root = "."
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if len(o.Targets) == 0 && o.SAMBuild == "" {
		return errors.New("nothing to build: no -targets and no -sam-build")
	}
	if o.Commit == "" {
		c, err := gitCommit(ctx, o.Root)
		if err != nil {
			return err
		}
		o.Commit = c
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	if err := buildCLIs(ctx, o); err != nil {
		return err
	}
	if o.SAMBuild != "" {
		if err := packageSAM(o); err != nil {
			return err
		}
	}
	sums, err := writeSums(o.Out)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Log, "release %s (commit %s) in %s: %d files in SHA256SUMS\n", version.Number(), o.Commit, o.Out, sums)
	return nil
}

// gitCommit is HEAD's hash, with +dirty when tracked files have changes.
func gitCommit(ctx context.Context, root string) (string, error) {
	head, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse HEAD (pass -commit outside a checkout): %w", err)
	}
	c := strings.TrimSpace(string(head))
	status, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		return "", fmt.Errorf("git status: %w", err)
	}
	if len(bytes.TrimSpace(status)) > 0 {
		c += "+dirty"
	}
	return c, nil
}

// CLIName is the file name of one CLI build.
func CLIName(target string) string {
	return fmt.Sprintf("outboxkeeper-%s-%s", version.Number(), strings.ReplaceAll(target, "/", "-"))
}

// buildCLIs builds every target at once: each go build is mostly one
// core's link and compile of packages the others share through the build
// cache, so running them together costs less than one after the other.
func buildCLIs(ctx context.Context, o Options) error {
	g, ctx := errgroup.WithContext(ctx)
	var logMu sync.Mutex // the builds report as they finish
	for _, target := range o.Targets {
		goos, goarch, ok := strings.Cut(target, "/")
		if !ok || goos == "" || goarch == "" {
			return fmt.Errorf("-targets: %q is not GOOS/GOARCH", target)
		}
		dst, err := filepath.Abs(filepath.Join(o.Out, CLIName(target)))
		if err != nil {
			return err
		}
		g.Go(func() error {
			// Static, reproducible: no cgo, no local paths, no symbol
			// table; the commit is the one thing stamped.
			cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
				"-ldflags", "-s -w -X github.com/outboxkeeper/outboxkeeper/internal/version.commit="+o.Commit,
				"-o", dst, "./cmd/outboxkeeper")
			cmd.Dir = o.Root
			cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("go build %s: %v\n%s", target, err, b)
			}
			fi, err := os.Stat(dst)
			if err != nil {
				return err
			}
			logMu.Lock()
			defer logMu.Unlock()
			fmt.Fprintf(o.Log, "  %-40s %9d bytes\n", filepath.Base(dst), fi.Size())
			return nil
		})
	}
	return g.Wait()
}

// packageSAM copies a `sam build` output to OUT/sam and completes its
// template's metadata.
func packageSAM(o Options) error {
	dst := filepath.Join(o.Out, "sam")
	if err := copyTree(o.SAMBuild, dst); err != nil {
		return fmt.Errorf("copy %s: %w", o.SAMBuild, err)
	}
	for _, f := range []string{"LICENSE", "README.md"} {
		if err := copyFile(filepath.Join(o.Root, f), filepath.Join(dst, f)); err != nil {
			return err
		}
	}
	path := filepath.Join(dst, "template.yaml")
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := CompleteMetadata(text, version.Number())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(o.Log, "  %-40s %9d bytes (SemanticVersion %s)\n", "sam/template.yaml", len(out), version.Number())
	return nil
}

// sarKey is the template Metadata key the Serverless Application
// Repository reads.
const sarKey = "AWS::ServerlessRepo::Application"

// CompleteMetadata sets the release's values in a template's Serverless
// Application Repository metadata: SemanticVersion, SourceCodeUrl at the
// version's tag, and LicenseUrl and ReadmeUrl as the files beside the
// template (sam build rewrote them relative to the source), then checks
// the metadata against the repository's rules.
func CompleteMetadata(text []byte, ver string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(text, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 {
		return nil, errors.New("not a YAML document")
	}
	meta := mapping(doc.Content[0], "Metadata")
	app := mapping(meta, sarKey)
	if app == nil {
		return nil, fmt.Errorf("no Metadata.%s", sarKey)
	}
	set(app, "SemanticVersion", ver)
	set(app, "SourceCodeUrl", Repository+"/tree/v"+ver)
	set(app, "LicenseUrl", "LICENSE")
	set(app, "ReadmeUrl", "README.md")
	var m map[string]any
	if err := app.Decode(&m); err != nil {
		return nil, err
	}
	if problems := CheckMetadata(m); len(problems) > 0 {
		return nil, fmt.Errorf("Metadata.%s: %s", sarKey, strings.Join(problems, "; "))
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

// mapping is the mapping value of key in the mapping node n, or nil.
func mapping(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key && n.Content[i+1].Kind == yaml.MappingNode {
			return n.Content[i+1]
		}
	}
	return nil
}

// set puts key: value (a string) into the mapping node n.
func set(n *yaml.Node, key, value string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content[i+1] = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}
			return
		}
	}
	n.Content = append(n.Content,
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value})
}

// The Serverless Application Repository's limits on an application's
// metadata (its CreateApplication API reference).
var (
	sarName    = regexp.MustCompile(`^[a-zA-Z0-9-]{1,140}$`)
	sarAuthor  = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9]|-[a-z0-9])*$`)
	sarLabel   = regexp.MustCompile(`^[a-zA-Z0-9+\-_:/@]{1,127}$`)
	sarSemver  = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)
	sarHTTPURL = regexp.MustCompile(`^https://\S+$`)
)

// CheckMetadata lists what the Serverless Application Repository would
// refuse in an application's metadata, or what `sam publish` needs and
// lacks.
func CheckMetadata(m map[string]any) []string {
	str := func(k string) string { s, _ := m[k].(string); return s }
	var p []string
	if !sarName.MatchString(str("Name")) {
		p = append(p, fmt.Sprintf("Name %q: 1 to 140 letters, digits and hyphens", str("Name")))
	}
	if d := str("Description"); d == "" || len(d) > 256 {
		p = append(p, fmt.Sprintf("Description: 1 to 256 characters, not %d", len(d)))
	}
	if a := str("Author"); !sarAuthor.MatchString(a) || len(a) > 127 {
		p = append(p, fmt.Sprintf("Author %q: lower-case letters, digits and single hyphens inside", a))
	}
	if str("SpdxLicenseId") == "" {
		p = append(p, "SpdxLicenseId is missing")
	}
	if str("LicenseUrl") == "" || str("ReadmeUrl") == "" {
		p = append(p, "LicenseUrl and ReadmeUrl are needed")
	}
	if !sarSemver.MatchString(str("SemanticVersion")) {
		p = append(p, fmt.Sprintf("SemanticVersion %q is not a semantic version", str("SemanticVersion")))
	}
	for _, k := range []string{"SourceCodeUrl", "HomePageUrl"} {
		if v := str(k); v != "" && !sarHTTPURL.MatchString(v) {
			p = append(p, fmt.Sprintf("%s %q is not an https URL", k, v))
		}
	}
	labels, _ := m["Labels"].([]any)
	if len(labels) > 10 {
		p = append(p, fmt.Sprintf("%d Labels, at most 10", len(labels)))
	}
	for _, l := range labels {
		if s, _ := l.(string); !sarLabel.MatchString(s) {
			p = append(p, fmt.Sprintf("Label %v: 1 to 127 of letters, digits and + - _ : / @", l))
		}
	}
	return p
}

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		return copyFile(path, target)
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// writeSums writes OUT/SHA256SUMS over every file under OUT, sorted by
// path, in the format `sha256sum -c SHA256SUMS` checks, and says how many.
func writeSums(out string) (int, error) {
	var lines []string
	err := filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(out, path)
		if err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		lines = append(lines, hex.EncodeToString(h.Sum(nil))+"  "+filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return 0, err
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i][66:] < lines[j][66:] })
	return len(lines), os.WriteFile(filepath.Join(out, "SHA256SUMS"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
