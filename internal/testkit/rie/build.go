package rie

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Build compiles the Go package pkg (a path relative to root, the module
// root, e.g. "./functions/fill") into the bootstrap at out. The tag is the
// one `sam build` uses (lambda.norpc: provided.* runtimes never speak the
// legacy RPC protocol), with CGO off as deployed so both link the same
// way, but for the host's OS and architecture whatever the caller's
// GOOS/GOARCH say, since rie runs the binary here (deployed: arm64).
func Build(ctx context.Context, root, pkg, out string) error {
	dir := filepath.Dir(out)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Link to a temporary name and rename it into place: rename is atomic,
	// so processes building the same package at once (parallel test
	// packages) never see, or run, a half-written file.
	tmp, err := os.CreateTemp(dir, filepath.Base(out)+"-*")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // no-op after the rename
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-o", tmp.Name(), pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	return os.Rename(tmp.Name(), out)
}
