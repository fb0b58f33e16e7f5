package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/admin"
)

// Every HTTP answer doctor reads (the running towerd's /stats, the Consul
// agent's API, Prometheus's rules) is bounded in time by the request's
// context (-timeout, for the whole exchange, body included) and in size by
// maxBody: whoever answers on the address — the real server, a wedged
// one, or a local user who took its port — can make doctor wait that long
// and hold that much, no more.

// maxBody bounds one answer: /v1/agent/checks of an agent with a few
// thousand checks, with their outputs, fits.
const maxBody = 8 << 20

// errBodyTooLarge is wrapped when an answer passes maxBody.
var errBodyTooLarge = errors.New("answer larger than doctor reads")

// statusError is an answer that is not 200, with its code (403 is
// Consul's ACL refusal, a 5xx the agent's own failure) and the start of
// its body (others' text: escaped where it is printed).
type statusError struct {
	Code int
	Body string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Code, http.StatusText(e.Code), admin.OneLine(e.Body))
}

// getJSON sends GET url with headers and decodes a 200 answer into v.
func getJSON(ctx context.Context, client *http.Client, url string, header http.Header, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	limit := int64(maxBody)
	if resp.StatusCode != http.StatusOK {
		limit = 4 << 10 // an error's text, for the finding
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return &statusError{Code: resp.StatusCode, Body: string(body)}
	}
	if int64(len(body)) > limit {
		return fmt.Errorf("%w (%d bytes)", errBodyTooLarge, limit)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("not the JSON expected: %w", err)
	}
	return nil
}

// httpClient talks to one server. A unix:// address dials that socket
// whatever the URL's host. No proxy from the environment: every server
// doctor asks is on this node.
func httpClient(unixSocket string) *http.Client {
	tr := &http.Transport{Proxy: nil, MaxIdleConns: 1, DisableCompression: true}
	if unixSocket != "" {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", unixSocket)
		}
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse // a redirect is an answer like any other non-200
	}}
}

// readRunning asks the running towerd's admin server for /stats.
func readRunning(ctx context.Context, addr string, timeout time.Duration) *runningTowerd {
	r := &runningTowerd{Addr: addr}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r.Err = getJSON(ctx, httpClient(""), "http://"+addr+"/stats", nil, &r.Report)
	return r
}

// oneLineErr is err's text on one line, without Go's request preamble.
func oneLineErr(err error) string {
	s := admin.OneLine(err.Error())
	if i := strings.Index(s, ": dial "); i >= 0 && strings.HasPrefix(s, "Get ") {
		s = s[i+2:]
	}
	return s
}
