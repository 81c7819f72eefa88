// Package repo finds the checkout the tools and tests run in.
package repo

import (
	"errors"
	"os"
	"path/filepath"
)

// Root returns the directory holding go.mod, walking up from the working
// directory: `go test` runs each package in its own folder, and the local
// commands may be started from any sub-folder.
func Root() (string, error) {
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
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
