package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Target is where a client call goes: towerd's control socket, or its
// admin port (which serves only what anyone may read).
type Target struct {
	// Socket is the control socket's path; when set, Addr is not used.
	Socket string
	// Addr is the admin server's ip:port.
	Addr string
}

func (t Target) String() string {
	if t.Socket != "" {
		return t.Socket
	}
	return t.Addr
}

// ErrDenied is wrapped by Call's error when the caller may not use the
// control socket: the socket file's mode refused the connection, or towerd
// refused the peer (403). Only root, towerd's user and the members of the
// operators' group may.
var ErrDenied = errors.New("permission denied")

// Call sends one request to t: form as the query (GET) or the url-encoded
// body (POST), or body as it is. It returns the body of a 200 answer;
// anything else is an error in one line that says what it usually means
// (wrapping ErrDenied when the caller lacks the right).
func Call(t Target, method, path string, form url.Values, body io.Reader, timeout time.Duration) ([]byte, error) {
	host := t.Addr
	transport := &http.Transport{DisableKeepAlives: true}
	if t.Socket != "" {
		// The host in the URL is only a name: every connection goes to the
		// socket. "localhost" passes the admin port's Host check too.
		host = "localhost"
		transport.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			if err := checkSocketFile(t.Socket); err != nil {
				return nil, err
			}
			c, err := dialUnixRetrying(ctx, t.Socket)
			if err != nil {
				return nil, err
			}
			if err := checkServerPeer(c, t.Socket); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		}
	}
	target := "http://" + host + path
	contentType := "application/octet-stream"
	if form != nil {
		if method == http.MethodGet {
			target += "?" + form.Encode()
		} else {
			body, contentType = strings.NewReader(form.Encode()), "application/x-www-form-urlencoded"
		}
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	client := &http.Client{Timeout: timeout, Transport: transport}
	resp, err := client.Do(req)
	if err != nil {
		return nil, dialError(t, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		return nil, fmt.Errorf("reading %s%s: %v", t, path, err)
	}
	switch {
	case resp.StatusCode == http.StatusForbidden && t.Socket != "":
		return nil, fmt.Errorf("%w: %s", ErrDenied, OneLine(string(data)))
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s%s answered %s: %s", t, path, resp.Status, OneLine(string(data)))
	}
	return data, nil
}

// dialUnixRetrying connects to a Unix socket, trying again while its
// listen queue is full: connect(2) on a non-blocking Unix socket fails
// with EAGAIN then, where a TCP SYN would wait, and a flood of connections
// keeps the queue full for moments at a time while towerd makes room
// (issue 35). The request's context bounds the tries.
func dialUnixRetrying(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	wait := time.Millisecond
	for {
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil || !errors.Is(err, syscall.EAGAIN) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// dialError says what a failed request usually means.
func dialError(t Target, err error) error {
	switch {
	case errors.Is(err, ErrUntrustedServer):
		var untrusted *untrustedError
		if errors.As(err, &untrusted) {
			return untrusted
		}
		return err
	case t.Socket != "" && (errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)):
		return fmt.Errorf("%w: cannot connect to %s: only root and the members of towerd's operators' group may "+
			"(sudo, or: usermod -aG towerd $USER, then log in again)", ErrDenied, t.Socket)
	case t.Socket != "" && errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("no towerd control socket at %s (no such file): is towerd running, and is this its [control] socket?", t.Socket)
	case t.Socket != "" && errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("no towerd on control socket %s (connection refused): is towerd running, and is this its [control] socket?", t.Socket)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("no towerd admin server at %s (connection refused): is towerd running, and is this its [admin] listen?", t.Addr)
	}
	return fmt.Errorf("asking %s: %v", t, OneLine(err.Error()))
}

// OneLine is s up to its first line break, trimmed: errors from HTTP
// clients and servers can run to pages.
func OneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// Render prints the human view: what an operator checks first when
// services fail together (is it DNS?): hit ratio, stale answers, the
// slowest upstream, the Consul watch. Its fields hold others' text (the
// agent's errors, a rejected file's), so it goes out with control
// characters escaped (printable.go).
func Render(w io.Writer, r Report, now time.Time) {
	if r.ConsulWatch != nil && r.ConsulWatch.LastError != "" {
		cw := *r.ConsulWatch
		cw.LastError = Printable(cw.LastError)
		r.ConsulWatch = &cw
	}
	if r.LastReload != nil && r.LastReload.Error != "" {
		lr := *r.LastReload
		lr.Error = Printable(lr.Error)
		r.LastReload = &lr
	}
	var b strings.Builder
	render(&b, r, now)
	_, _ = io.WriteString(w, PrintableLines(b.String()))
}

func render(w io.Writer, r Report, now time.Time) {
	state := "ready"
	if !r.Ready {
		state = "NOT READY"
	}
	built := ""
	if r.GoVersion != "" {
		built = " (" + r.GoVersion + ")"
	}
	fmt.Fprintf(w, "towerd %s%s  up %s  %s  listen %s\n", r.Version, built,
		time.Duration(r.UptimeSeconds*float64(time.Second)).Round(time.Second), state, strings.Join(r.Config.Listen, " "))
	if r.LogQueries {
		fmt.Fprintln(w, "query log    on (towerd log-queries off to stop it)")
	}

	q := r.Queries
	fmt.Fprintf(w, "queries      %d  (%s)  p50 %s  p99 %s\n", q.Total, counts(q.BySource), seconds(q.LatencyP50Seconds), seconds(q.LatencyP99Seconds))
	fmt.Fprintf(w, "rcodes       %s\n", counts(q.ByRcode))
	c := r.Cache
	fmt.Fprintf(w, "cache        hit ratio %.1f%% (%d hits, %d misses)  stale answers %d  prefetches %d\n",
		100*c.HitRatio, c.Hits, c.Misses, c.StaleAnswers, c.Prefetches)
	fmt.Fprintf(w, "             %d of %d entries, %d evictions\n", c.Entries, c.Capacity, c.Evictions)
	fmt.Fprintf(w, "in flight    %d of %d, %d rejected at the cap\n", r.Inflight.Now, r.Inflight.Limit, r.Inflight.Rejections)

	for i, z := range r.Zones {
		label := ""
		if i == 0 {
			label = "zones"
		}
		fmt.Fprintf(w, "%-12s %-16s %d queries, %d stale, %d SERVFAIL; upstream %d sent, %s; p99 %s; hedges %d sent, %d won, %d refused, %d explored; %d/%d up\n",
			label, z.Name, z.Queries, z.StaleAnswers, z.ServFail, z.UpstreamRequests, errorCounts(z.Errors),
			seconds(z.LatencyP99Seconds), z.Hedges["sent"], z.Hedges["won"], z.Hedges["refused"], z.Hedges["explore"], z.ServersUp, z.Servers)
	}

	// Slowest first: the upstream that makes clients wait is the one to look at.
	ups := append([]serverStats(nil), r.Upstreams...)
	sort.SliceStable(ups, func(i, j int) bool { return ups[i].LatencyP99Seconds > ups[j].LatencyP99Seconds })
	for i, u := range ups {
		label := ""
		if i == 0 {
			label = "upstreams"
		}
		health := "up"
		if !u.Up {
			health = "DOWN"
		}
		fmt.Fprintf(w, "%-12s %-24s %-4s zone %s: %d sent, %s; p50 %s p99 %s srtt %s tail %s\n",
			label, u.Server, health, u.Zone, u.Requests, errorCounts(u.Errors),
			seconds(u.LatencyP50Seconds), seconds(u.LatencyP99Seconds), seconds(u.SRTTSeconds), seconds(u.TailSeconds))
	}

	if cw := r.ConsulWatch; cw == nil {
		fmt.Fprintf(w, "consul watch not running\n")
	} else {
		last := "never"
		if !cw.LastSuccess.IsZero() {
			last = now.Sub(cw.LastSuccess).Round(time.Second).String() + " ago"
		}
		fmt.Fprintf(w, "consul watch %s, %d services, index %d, last success %s, %d errors", cw.State, cw.Services, cw.LastIndex, last, cw.Errors)
		if cw.MaxWatches > 0 {
			fmt.Fprintf(w, "; %s mode, watching %d/%d (%d pinned, cap in force %d), evicted cap %d idle %d 429 %d, agent 429s %d",
				cw.Mode, cw.Watched, cw.MaxWatches, cw.Pinned, cw.Limit, cw.Evictions["cap"], cw.Evictions["idle"],
				cw.Evictions["429"], cw.Agent429s)
			if cw.CatalogCapped {
				fmt.Fprintf(w, " (CATALOG LARGER THAN max_watches: not all watched)")
			}
			fmt.Fprintf(w, "; evicted empty %d, refused frequency %d streams %d pinned %d, empty reads %d "+
				"(%d names kept out), agent views %d/%d, resyncs %d, oversize bodies %d",
				cw.Evictions["empty"], cw.Refused["frequency"], cw.Refused["streams"], cw.Refused["pinned"],
				cw.EmptyReads, cw.KeptOut, cw.AgentViews, cw.AgentViewsLimit, cw.Resyncs, cw.OversizeBodies)
		}
		if cw.LastError != "" {
			fmt.Fprintf(w, " (last: %s)", OneLine(cw.LastError))
		}
		fmt.Fprintln(w)
	}
	if lr := r.LastReload; lr != nil {
		result := "ok"
		if !lr.OK {
			result = "REJECTED: " + lr.Error
		}
		fmt.Fprintf(w, "last reload  %s ago: %s\n", now.Sub(lr.At).Round(time.Second), result)
	}
}

// counts renders {"cache": 4, "stale": 1} as "cache 4, stale 1", largest first.
func counts(m map[string]uint64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// errorCounts renders upstream errors, or "no errors".
func errorCounts(m map[string]uint64) string {
	if len(m) == 0 {
		return "no errors"
	}
	return "errors: " + counts(m)
}

// seconds renders a latency readably ("412µs", "3.1ms", "1.2s"); "-" for
// none measured.
func seconds(s float64) string {
	if s <= 0 {
		return "-"
	}
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}
