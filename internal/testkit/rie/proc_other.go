//go:build !linux

package rie

import (
	"os"
	"os/exec"
)

// Elsewhere (rie is built for Linux; this keeps the packages compiling for
// editors on other systems) there is no Pdeathsig and no /proc: Stop
// signals rie only, and os.Interrupt is the portable polite signal.
var terminate = os.Interrupt

func setProcAttr(*exec.Cmd) {}

func childPids(int) []int { return nil }

// listens cannot tell elsewhere; a connection that succeeds is taken as
// ours.
func listens(int, string) bool { return true }
