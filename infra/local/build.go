// Package local runs outboxkeeper on one machine with the real parts of
// docs/design.md §8: the functions' bootstrap binaries under aws-lambda-rie, invoked
// over the Lambda HTTP API exactly as Lambda does; a scheduler that plays
// EventBridge for fill and sweep; and a poller that plays the SQS event
// source mapping for compensate. `make demo` and `make up` are built on it.
package local

import (
	"context"
	"path/filepath"

	"golang.org/x/sync/errgroup"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/rie"
)

// Functions are the three function names, which are also their folders
// under functions/.
var Functions = []string{"fill", "sweep", "compensate", "prune"}

// BuildBootstraps builds functions/<fn> for the host into outDir/<fn>/bootstrap
// (see rie.Build) and returns the paths by name.
func BuildBootstraps(ctx context.Context, repoRoot, outDir string) (map[string]string, error) {
	paths := make(map[string]string, len(Functions))
	g, ctx := errgroup.WithContext(ctx)
	for _, fn := range Functions {
		out := filepath.Join(outDir, fn, "bootstrap")
		paths[fn] = out
		g.Go(func() error { return rie.Build(ctx, repoRoot, "./functions/"+fn, out) })
	}
	return paths, g.Wait()
}
