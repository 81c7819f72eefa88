// Package local runs outboxkeeper on one machine with the real parts of
// DESIGN §8: the functions' bootstrap binaries under aws-lambda-rie, invoked
// over the Lambda HTTP API exactly as Lambda does; a scheduler that plays
// EventBridge for fill and sweep; and a poller that plays the SQS event
// source mapping for compensate. `make demo` and `make up` are built on it.
package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sync/errgroup"
)

// Functions are the three function names, which are also their folders
// under functions/.
var Functions = []string{"fill", "sweep", "compensate"}

// BuildBootstraps builds functions/<fn> for the host into outDir/<fn>/bootstrap
// and returns the paths by name. The tag is the one `sam build` uses
// (lambda.norpc: provided.* runtimes never speak the legacy RPC protocol),
// but for the host's OS and architecture, since rie runs them here.
func BuildBootstraps(ctx context.Context, repoRoot, outDir string) (map[string]string, error) {
	paths := make(map[string]string, len(Functions))
	g, ctx := errgroup.WithContext(ctx)
	for _, fn := range Functions {
		out := filepath.Join(outDir, fn, "bootstrap")
		paths[fn] = out
		g.Go(func() error {
			cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-o", out, "./functions/"+fn)
			cmd.Dir = repoRoot
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("build functions/%s: %w\n%s", fn, err, b)
			}
			return nil
		})
	}
	return paths, g.Wait()
}

// RepoRoot finds the module root (the folder holding go.mod) from the
// working directory upwards, so the commands work from any sub-folder and
// from `go test`, which runs in the package's folder.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
