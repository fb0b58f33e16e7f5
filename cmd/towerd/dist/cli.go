package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// command is one entry of towerd's subcommand table as `towerd help -json`
// prints it; the man page is written from these, so a subcommand or flag
// the binary has is documented without another list to keep in step.
type command struct {
	Name     string     `json:"name"` // "stats", or two words for a group: "cache list"
	Synopsis string     `json:"synopsis"`
	Summary  string     `json:"summary"`
	Flags    []flagHelp `json:"flags"`
}

// flagHelp is one flag: its name, its value's type ("" for a boolean) and
// its usage text.
type flagHelp struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Usage string `json:"usage"`
}

// runBinary runs the towerd binary with args and returns its stdout. It
// must not take long: a binary that served instead is cut off.
func runBinary(binary string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s %s: still running after 10s", binary, strings.Join(args, " "))
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v\n%s", binary, strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// readCLI asks the binary for its subcommand table (`towerd help -json`).
func readCLI(binary string) ([]command, error) {
	out, err := runBinary(binary, "help", "-json")
	if err != nil {
		return nil, err
	}
	var cmds []command
	if err := json.Unmarshal(out, &cmds); err != nil {
		return nil, fmt.Errorf("%s help -json: %w", binary, err)
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("%s help -json lists no subcommands", binary)
	}
	return cmds, nil
}
