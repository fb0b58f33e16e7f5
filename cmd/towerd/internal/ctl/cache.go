package ctl

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/base"
	"github.com/towerd/towerd/resolver/boundedfile"
)

// `towerd cache list|dump|load`: the cache of a running towerd (ctl.go
// has the control client they share).

// cacheEntry is the part of /cache/list's entries the table shows.
type cacheEntry struct {
	Name             string   `json:"name"`
	Key              string   `json:"key"`
	Type             string   `json:"type"`
	Kind             string   `json:"kind"`
	State            string   `json:"state"`
	TTLSeconds       float64  `json:"ttl_seconds"`
	RemainingSeconds float64  `json:"remaining_seconds"`
	ExpiredSeconds   float64  `json:"expired_seconds"`
	Origin           string   `json:"origin"` // "upstream", "state file", "cache load"
	Answer           []string `json:"answer"`
}

// CmdCacheList is `towerd cache list`.
var CmdCacheList = &base.Command{Name: "cache list", Synopsis: "[-zone ZONE] [-stale] [-json]", Summary: "list cached answers with their state and age",
	Run: cacheListCommand}

// cacheListCommand is `towerd cache list`.
func cacheListCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("cache list", "[-zone ZONE] [-stale] [-json] [-control PATH]", stderr)
	zone := c.fs.String("zone", "", "only names at or below ZONE")
	stale := c.fs.Bool("stale", false, "only entries past their TTL (served stale, or expired)")
	asJSON := c.fs.Bool("json", false, "print the control socket's JSON as it is")
	if _, code, ok := c.parseArgs(args, 0, 0, ""); !ok {
		return code
	}
	form := url.Values{}
	if *zone != "" {
		form.Set("zone", *zone)
	}
	if *stale {
		form.Set("stale", "1")
	}
	var res struct{ Entries []cacheEntry }
	data, code := c.call(http.MethodGet, "/cache/list", form, nil, &res)
	if code != base.ExitOK {
		return code
	}
	if *asJSON {
		_, _ = stdout.Write(data)
		return base.ExitOK
	}
	fmt.Fprintf(stdout, "%-40s %-6s %-7s %-8s %-10s %-10s %s\n", "NAME", "TYPE", "STATE", "TTL", "AGE", "FROM", "ANSWER")
	for _, e := range res.Entries {
		age := "in " + secs(e.RemainingSeconds) // fresh: time left
		if e.State != "fresh" {
			age = secs(e.ExpiredSeconds) + " ago"
		}
		answer := strings.Join(rdata(e.Answer), " ")
		if e.Kind == "nodata" {
			answer = "(NODATA)"
		}
		name := e.Name
		for _, f := range strings.Fields(e.Key) {
			if strings.HasPrefix(f, "+") {
				name += " " + f // "+do", "+cd": answers kept apart for DNSSEC-aware clients
			}
		}
		fmt.Fprintf(stdout, "%-40s %-6s %-7s %-8s %-10s %-10s %s\n", name, e.Type, e.State, secs(e.TTLSeconds), age, e.Origin, answer)
	}
	fmt.Fprintf(stdout, "%d %s\n", len(res.Entries), plural(len(res.Entries), "entry", "entries"))
	return base.ExitOK
}

// secs renders seconds as a rounded duration ("30s", "4m10s").
func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

// rdata keeps the data of presentation-format records ("a. 30 IN A
// 192.0.2.1" → "192.0.2.1").
func rdata(rrs []string) []string {
	out := make([]string, 0, len(rrs))
	for _, rr := range rrs {
		f := strings.Fields(rr)
		if len(f) > 4 {
			out = append(out, strings.Join(f[4:], " "))
		}
	}
	return out
}

// CmdCacheDump is `towerd cache dump`.
var CmdCacheDump = &base.Command{Name: "cache dump", Synopsis: "FILE", Summary: "write the cache to FILE in the state directory's format",
	Run: cacheDumpCommand}

// cacheDumpCommand is `towerd cache dump FILE`: the running cache in the
// state directory's format (cache.Dump), written 0600 like the state file
// ("-" is standard output).
func cacheDumpCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("cache dump", "FILE [-control PATH]", stderr)
	pos, code, ok := c.parseArgs(args, 1, 1, `name one FILE ("-" for standard output)`)
	if !ok {
		return code
	}
	data, code := c.call(http.MethodGet, "/cache/dump", nil, nil, nil)
	if code != base.ExitOK {
		return code
	}
	if pos[0] == "-" {
		_, _ = stdout.Write(data)
		return base.ExitOK
	}
	// O_EXCL: never follow a link planted at FILE or overwrite a file.
	f, err := os.OpenFile(pos[0], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return c.fail(base.ExitFail, "%v", err)
	}
	fmt.Fprintf(stdout, "wrote %s (%d bytes)\n", pos[0], len(data))
	return base.ExitOK
}

// CmdCacheLoad is `towerd cache load`.
var CmdCacheLoad = &base.Command{Name: "cache load", Synopsis: "FILE", Summary: "add the entries of a cache file to the running cache",
	Run: cacheLoadCommand}

// cacheLoadCommand is `towerd cache load FILE`. The file is the operator's:
// it is read as it is (a regular file, opened without blocking, never
// renamed, whatever towerd thinks of it), and towerd checks every entry
// itself (admin/loadcheck.go: the state file's checks, and only what an
// upstream of the running configuration could have answered).
func cacheLoadCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("cache load", "FILE [-control PATH]", stderr)
	pos, code, ok := c.parseArgs(args, 1, 1, "name one FILE written by towerd cache dump or found in the state directory")
	if !ok {
		return code
	}
	f, err := openLoadFile(pos[0])
	if err != nil {
		return c.fail(base.ExitFail, "%v", err)
	}
	defer f.Close()
	var res struct {
		Loaded, Skipped, Rejected, Clamped int
		Rejections                         map[string]int
	}
	if _, code := c.call(http.MethodPost, "/cache/load", nil, f, &res); code != base.ExitOK {
		return code
	}
	fmt.Fprintf(stdout, "loaded %d %s from %s (%d skipped: expired past the stale age, cached already or beyond cache.size; %d rejected; %d TTLs cut to max_ttl)\n",
		res.Loaded, plural(res.Loaded, "entry", "entries"), pos[0], res.Skipped, res.Rejected, res.Clamped)
	for why, n := range res.Rejections {
		fmt.Fprintf(stdout, "  rejected %d: %s\n", n, why)
	}
	return base.ExitOK
}

// maxLoadFile is the largest file cache load sends: the control channel's
// own bound on a load (admin's maxLoadBytes).
const maxLoadFile = 256 << 20

// openLoadFile opens FILE for cache load by the rule every file towerd
// reads is opened by (resolver/boundedfile): without blocking (a FIFO at
// the path must not hang the command), a regular file of at most
// maxLoadFile bytes, links followed (the operator names the file).
func openLoadFile(path string) (*boundedfile.File, error) {
	return boundedfile.Open(path, boundedfile.Rule{MaxSize: maxLoadFile})
}
