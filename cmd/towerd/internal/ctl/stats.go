package ctl

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/admin"
	"github.com/towerd/towerd/cmd/towerd/internal/base"
)

// CmdStats is `towerd stats`.
var CmdStats = &base.Command{Name: "stats", Synopsis: "[-admin ADDR] [-json]", Summary: "show a running towerd's figures",
	Run: statsCommand}

// statsCommand is `towerd stats`: it reads a running towerd's /stats and
// prints a compact view for humans, or the JSON for scripts.
func statsCommand(args []string, stdout, stderr io.Writer) int {
	// The admin server is found as for every control subcommand (ctl.go).
	c := newCtl("stats", "[-admin ADDR] [-json]", stderr)
	asJSON := c.fs.Bool("json", false, "print the /stats JSON as it is, for scripts")
	rest, code, done := c.parse(args)
	if done {
		return code
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "towerd stats: unexpected argument %q\n", rest[0])
		return base.ExitConfig
	}
	addr, note, code, ok := c.addr()
	if !ok {
		return code
	}

	body, err := admin.Fetch(addr)
	if err != nil {
		fmt.Fprintf(stderr, "towerd stats: %v%s\n", err, note)
		return base.ExitFail
	}
	if *asJSON {
		_, _ = stdout.Write(body)
		return base.ExitOK
	}
	var r admin.Report
	if err := json.Unmarshal(body, &r); err != nil {
		fmt.Fprintf(stderr, "towerd stats: %s/stats is not towerd's stats JSON: %v\n", addr, err)
		return base.ExitFail
	}
	admin.Render(stdout, r, time.Now())
	return base.ExitOK
}
