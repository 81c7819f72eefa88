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

// Functions are the function names every local deployment runs, which
// are also their folders under functions/.
var Functions = []string{"fill", "sweep", "compensate", "prune"}

// Relay is the relay function's name: run only with Options.RelayTarget,
// as the template deploys it only with a RelayTarget.
const Relay = "relay"

// BuildBootstraps builds functions/<fn> for the host into outDir/<fn>/bootstrap
// (see rie.Build) and returns the paths by name.
func BuildBootstraps(ctx context.Context, repoRoot, outDir string, fns ...string) (map[string]string, error) {
	if len(fns) == 0 {
		fns = Functions
	}
	paths := make(map[string]string, len(fns))
	g, ctx := errgroup.WithContext(ctx)
	for _, fn := range fns {
		out := filepath.Join(outDir, fn, "bootstrap")
		paths[fn] = out
		g.Go(func() error { return rie.Build(ctx, repoRoot, "./functions/"+fn, out) })
	}
	return paths, g.Wait()
}
