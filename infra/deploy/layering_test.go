package deploy

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// The folders say who uses what: what gets deployed or imported by an
// application (functions/, shared/, cmd/, the product's internal/) never
// depends on local tooling (infra/) or on the test harnesses
// (internal/testkit/). Checked on the real import graph, as `go list`
// builds it, tests excluded.

const module = "github.com/outboxkeeper/outboxkeeper"

// productPatterns are the product's packages.
var productPatterns = []string{"./functions/...", "./shared/...", "./cmd/...", "./internal/..."}

// toolingPrefixes are what no product package may depend on.
var toolingPrefixes = []string{module + "/infra/", module + "/internal/testkit/"}

type listedPackage struct {
	ImportPath string
	Deps       []string
}

func listPackages(t *testing.T, patterns ...string) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json=ImportPath,Deps"}, patterns...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		t.Fatalf("go list %v: %v\n%s", patterns, err, exitErr.Stderr)
	}
	if err != nil {
		t.Fatalf("go list %v: %v", patterns, err)
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func isTooling(path string) bool {
	for _, p := range toolingPrefixes {
		if strings.HasPrefix(path+"/", p) {
			return true
		}
	}
	return false
}

func TestProductPackagesImportNoToolingOrTestHarness(t *testing.T) {
	pkgs := listPackages(t, productPatterns...)
	product := 0
	for _, p := range pkgs {
		if isTooling(p.ImportPath) {
			continue // internal/testkit itself, matched by ./internal/...
		}
		product++
		for _, d := range p.Deps {
			if isTooling(d) {
				t.Errorf("%s depends on %s: product code must not import local tooling or test harnesses", p.ImportPath, d)
			}
		}
	}
	if product < 10 {
		t.Fatalf("go list found %d product packages: the patterns %v match less than the product", product, productPatterns)
	}
}

func TestTestHarnessesLiveUnderTestkit(t *testing.T) {
	// A harness is a package that imports "testing" outside a test file;
	// every one of them belongs under internal/testkit.
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		path, imports := fields[0], fields[1:]
		for _, imp := range imports {
			if imp == "testing" && !strings.HasPrefix(path, module+"/internal/testkit/") && !strings.HasPrefix(path, module+"/infra/") {
				t.Errorf("%s imports testing outside its tests: a test harness belongs under internal/testkit", path)
			}
		}
	}
}
