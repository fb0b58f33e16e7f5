package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// checkWarnings prints what `towerd check` points out about a valid
// configuration (issue 15): no file at the default path (built-in defaults
// run, which may not be what the operator meant), and listen addresses that
// allow does not cover.
func checkWarnings(o *options, cfg config.Config, stderr io.Writer) {
	if !o.set["config"] && o.configPath != "" {
		if _, err := os.Stat(o.configPath); errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stderr, "warning: no config file at %s: built-in defaults and flags only\n", o.configPath)
		}
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
}
