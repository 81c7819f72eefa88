package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/internal/version"
)

// command is a node of the command tree: either it has subcommands, or it
// runs.
type command struct {
	name    string
	summary string // one line, for the parent's list
	// help is the command's own help, below its usage line: what it does
	// and what a person needs to know to use it well.
	help string
	// flags declares the command's flags on fs and returns what run
	// reads; nil for none. A command takes flags only, no arguments.
	flags func(fs *flag.FlagSet) any
	run   func(ctx context.Context, e *env, opts any) error
	sub   []*command
}

// usageError is a command line that cannot be run; it exits exitUsage
// with one line pointing at the command's help.
type usageError struct{ msg string }

func (u *usageError) Error() string { return u.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// refusal is a command line a safety check declined (skip-stall without
// --yes, or past what may be skipped): it exits exitUsage with its
// message, which says why and what would be accepted, and nothing done.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

func refusef(format string, args ...any) error { return &refusal{fmt.Sprintf(format, args...)} }

// errAttention is returned by a command that worked and found something
// a person must act on; it exits exitAttention, its findings printed.
var errAttention = errors.New("needs attention")

func (c *command) path(parents []string) string {
	parts := append([]string{"outboxkeeper"}, parents...)
	if c != root {
		parts = append(parts, c.name)
	}
	return strings.Join(parts, " ")
}

// dispatch walks args down the tree and runs the command it names.
func (c *command) dispatch(ctx context.Context, e *env, parents []string, args []string) int {
	if c.sub != nil {
		if c == root && len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
			fmt.Fprintln(e.stdout, version.String())
			return exitOK
		}
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			c.printHelp(e.stdout, parents)
			if len(args) == 0 {
				return exitUsage
			}
			return exitOK
		}
		for _, s := range c.sub {
			if s.name == args[0] {
				return s.dispatch(ctx, e, c.below(parents), args[1:])
			}
		}
		c.usageLine(e, parents, fmt.Sprintf("unknown command %q", args[0]))
		return exitUsage
	}
	fs := flag.NewFlagSet(c.path(parents), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var opts any
	if c.flags != nil {
		opts = c.flags(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.printHelp(e.stdout, parents)
			return exitOK
		}
		c.usageLine(e, parents, err.Error())
		return exitUsage
	}
	if rest := fs.Args(); len(rest) > 0 {
		c.usageLine(e, parents, fmt.Sprintf("unexpected argument %q", rest[0]))
		return exitUsage
	}
	err := c.run(ctx, e, opts)
	var u *usageError
	var r *refusal
	switch {
	case errors.As(err, &r):
		fmt.Fprintf(e.stderr, "%s: refused: %v\n", c.path(parents), err)
		return exitUsage
	case err == nil:
		return exitOK
	case errors.Is(err, errAttention):
		return exitAttention
	case errors.As(err, &u):
		c.usageLine(e, parents, err.Error())
		return exitUsage
	}
	fmt.Fprintf(e.stderr, "%s: %v\n", c.path(parents), pg.ExplainTLS(err))
	return exitError
}

// usageLine is how a command line that cannot run is answered: one line
// on stderr saying what is wrong and where the help is, so the mistake
// is not lost above a page of help.
func (c *command) usageLine(e *env, parents []string, msg string) {
	name := c.path(parents)
	fmt.Fprintf(e.stderr, "%s: %s (see '%s --help')\n", name, msg, name)
}

// below is the parents list of c's subcommands.
func (c *command) below(parents []string) []string {
	if c == root {
		return parents
	}
	return append(append([]string{}, parents...), c.name)
}

func (c *command) printHelp(w io.Writer, parents []string) {
	name := c.path(parents)
	if c.sub != nil {
		fmt.Fprintf(w, "Usage: %s <command> [flags]\n\n%s\n\nCommands:\n", name, strings.TrimSpace(c.help))
		for _, s := range c.sub {
			fmt.Fprintf(w, "  %-11s %s\n", s.name, s.summary)
		}
		fmt.Fprintf(w, "\nRun '%s <command> --help' for a command's own help.\n", name)
		if c == root {
			fmt.Fprintf(w, "'%s --version' prints the version and the commit.\n", name)
		}
		fmt.Fprintf(w, "\n%s\n", loginHelp)
		return
	}
	fmt.Fprintf(w, "Usage: %s [flags]\n\n%s\n", name, strings.TrimSpace(c.help))
	if c.flags != nil {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		c.flags(fs)
		fmt.Fprintf(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	fmt.Fprintf(w, "\n%s\n", loginHelp)
}

// root is the CLI. A new command is one file with its *command and one
// line here.
var root = &command{
	name: "outboxkeeper",
	help: `Operate a PostgreSQL outbox that outboxkeeper maintains, from a shell:
the same login as the functions, the same words as the README.`,
	sub: []*command{statusCommand, deadCommand, dlqCommand, skipStallCommand, relayCommand, consumersCommand, recipientsCommand, migrateCommand, adoptCommand, versionCommand},
}

// loginHelp closes every help page: how any command logs in.
const loginHelp = `Logging in (as the functions do; the password is never printed):
  DATABASE_URL            a connection string, e.g.
                          postgres://user:password@host:5432/db?sslmode=verify-full&sslrootcert=ca.pem
  DATABASE_SECRET_ARN     instead: a Secrets Manager secret in the RDS shape (AWS credentials
                          and region from the usual places); for one RDS manages, which holds
                          only username and password, also DATABASE_HOST, DATABASE_PORT, DATABASE_NAME
  DATABASE_IAM_AUTH=true  sign an RDS IAM token for the user@host:port/db of DATABASE_URL
  DATABASE_CA_PEM, DATABASE_CA_SECRET_ARN
                          verify the server against this CA bundle (sslmode=verify-full)
  OUTBOX_SCHEMA           the outbox schema, default outbox (--schema overrides it)`

// listOrAll refuses a command that acts on listed rows or on --all when
// it is given neither (which says how to give them) or both: n is how
// many the list flag named.
func listOrAll(n int, all bool, flag, which string) error {
	switch {
	case n == 0 && !all:
		return usagef("say which: %s", which)
	case n > 0 && all:
		return usagef("%s and --all exclude each other", flag)
	}
	return nil
}
