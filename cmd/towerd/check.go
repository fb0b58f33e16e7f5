package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

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

// warnOwnResolvConf: zone "." follows the system's files (resolv_conf
// unset) while /etc/resolv.conf is towerd's own, so the files install
// follows stand in for it (config.SystemResolvConfs); check says so and
// names the fix.
func warnOwnResolvConf(stderr io.Writer, cfg config.Config, source string) {
	if source == "" || cfg.ResolvConf != "" {
		return
	}
	if _, note := config.SystemResolvConfs("/"); note != "" {
		fmt.Fprintf(stderr, "warning: %s\n", note)
	}
}

// printDropIns names the drop-ins (towerd.d/*.toml) read over the config
// file, so what check shows can be traced to the file that set it.
func printDropIns(stdout io.Writer, configPath string) {
	if configPath == "" {
		return
	}
	if files, err := config.DropIns(configPath); err == nil && len(files) > 0 {
		fmt.Fprintf(stdout, "  (read over %s: %s)\n", configPath, strings.Join(files, ", "))
	}
}
