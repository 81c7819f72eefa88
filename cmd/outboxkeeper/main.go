// Command outboxkeeper is the operator's CLI: what a person on call or a
// DBA reaches for, logging in exactly as the functions do (DATABASE_URL,
// DATABASE_SECRET_ARN or RDS IAM), never printing a password.
//
//	go install github.com/outboxkeeper/outboxkeeper/cmd/outboxkeeper@latest
//	outboxkeeper --help
//
// Each command is a *command in commands (command.go); one file a command
// (migrate.go), so adding one is adding a file and a line.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxkeeper/outboxkeeper/shared/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], config.Environment(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses, the same for every command.
const (
	exitOK = 0
	// exitError: the command failed (the database refused, a file could
	// not be written, ...); the message says why.
	exitError = 1
	// exitUsage: the command line is wrong, or a safety check refused it
	// (skip-stall without --yes); the message says how to call it.
	exitUsage = 2
	// exitAttention: the command worked, and what it found needs a person
	// (migrate status: this build cannot run on the schema as it is;
	// status: see its help for the rule).
	exitAttention = 3
)

// env is what a command reads from its caller: the environment, and where
// to write.
type env struct {
	vars           config.Lookup
	stdout, stderr io.Writer
}

// run is the CLI as a function of its arguments and environment, so the
// tests drive it exactly as a shell would.
func run(ctx context.Context, args []string, vars config.Lookup, stdout, stderr io.Writer) int {
	return root.dispatch(ctx, &env{vars: vars, stdout: stdout, stderr: stderr}, nil, args)
}
