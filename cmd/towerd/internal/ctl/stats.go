package ctl

import (
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/admin"
	"github.com/towerd/towerd/cmd/towerd/internal/base"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// statsTimeout bounds the /stats request: towerd answers it from memory.
const statsTimeout = 5 * time.Second

// CmdStats is `towerd stats`.
var CmdStats = &base.Command{Name: "stats", Synopsis: "[-admin ADDR | -control PATH] [-json]", Summary: "show a running towerd's figures",
	Run: statsCommand}

// statsCommand is `towerd stats`: it reads a running towerd's /stats and
// prints a compact view for humans, or the JSON for scripts. /stats is for
// anyone: it is read from the admin port, which any local user may reach;
// -control reads it over the control socket instead, as does a config whose
// admin server is off.
func statsCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("stats", "[-admin ADDR | -control PATH] [-json]", stderr)
	c.timeout = statsTimeout
	adminAddr := c.fs.String("admin", "", "ip:port of towerd's admin server (default: [admin] listen of the config file, else "+config.DefaultAdminListen+")")
	asJSON := c.fs.Bool("json", false, "print the /stats JSON as it is, for scripts")
	rest, code, done := c.parse(args)
	if done {
		return code
	}
	if len(rest) > 0 {
		return c.fail(base.ExitConfig, "unexpected argument %q", rest[0]) // without the usage, unlike parseArgs
	}
	var t admin.Target
	var note string
	switch loc, locNote := c.locate(); {
	case c.set("admin"):
		t = admin.Target{Addr: *adminAddr}
	case c.set("control"):
		t = admin.Target{Socket: *c.control}
	case loc.AdminListen != "":
		t, note = admin.Target{Addr: loc.AdminListen}, locNote
	case loc.ControlSocket != "":
		t, note = admin.Target{Socket: loc.ControlSocket}, locNote
	default:
		return c.fail(base.ExitFail, "the admin server and the control socket are off in %s; name one with -admin or -control", *c.config)
	}
	body, code := c.send(t, note, http.MethodGet, "/stats", nil, nil, nil)
	if code != base.ExitOK {
		return code
	}
	if *asJSON {
		_, _ = stdout.Write(body)
		return base.ExitOK
	}
	var r admin.Report
	if err := json.Unmarshal(body, &r); err != nil {
		return c.fail(base.ExitFail, "%s/stats is not towerd's stats JSON: %v", t, err)
	}
	admin.Render(stdout, r, time.Now())
	return base.ExitOK
}
