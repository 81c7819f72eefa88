// Command up is `make up` and `make down`: the three functions under
// aws-lambda-rie, scheduled and fed from SQS by the local driver, left
// running in the background for a developer to point an application at.
//
//	up          start (or show) the background stack and print its endpoints
//	up -down    stop it
//	up -serve   the background process itself (started by `up`)
//
// State lives in .local/up/: the pid file, the endpoints (endpoints.env,
// ready to source), the functions' logs and the driver's log (up.log).
//
// Environment (besides .local/stack.env): UP_DATABASE (default
// outboxkeeper_dev, kept between runs), UP_QUEUE (default
// outboxkeeper-rollbacks), UP_SCHEDULE (default 10s). FILL_*, SWEEP_* and
// COMPENSATE_* are passed on to the functions; unset ones keep the
// template's defaults.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/repo"
)

func main() {
	down := flag.Bool("down", false, "stop the background stack")
	serve := flag.Bool("serve", false, "run the stack in the foreground (what `up` starts in the background)")
	flag.Parse()

	root, err := repo.Root()
	if err != nil {
		fail(err)
	}
	st := newState(root)
	switch {
	case *down:
		err = stop(st)
	case *serve:
		err = runServe(st)
	default:
		err = start(st)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "up:", err)
	os.Exit(1)
}
