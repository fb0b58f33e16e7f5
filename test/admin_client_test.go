package test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// httpTimeout bounds one admin request; towerd answers from memory.
const httpTimeout = 10 * time.Second

// adminGet returns the body of GET http://admin/path, failing on any status
// but 200.
func adminGet(t *testing.T, admin, path string) []byte {
	t.Helper()
	client := &http.Client{Timeout: httpTimeout}
	resp, err := client.Get("http://" + admin + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v\n%s", path, resp.Status, err, body)
	}
	return body
}

// scrape reads /metrics and parses the exposition text.
func scrape(t *testing.T, admin string) ([]byte, map[string]*dto.MetricFamily) {
	t.Helper()
	body := adminGet(t, admin, "/metrics")
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return body, mfs
}

// sample sums the series of name whose labels include want. For a
// histogram name+"_count" gives its sample count.
func sample(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	histogramCount := false
	if base, ok := strings.CutSuffix(name, "_count"); ok && mfs[name] == nil {
		name, histogramCount = base, true
	}
	var total float64
	for _, m := range mfs[name].GetMetric() {
		matched := 0
		for _, lp := range m.GetLabel() {
			if v, ok := want[lp.GetName()]; ok && v == lp.GetValue() {
				matched++
			}
		}
		if matched != len(want) {
			continue
		}
		switch {
		case histogramCount:
			total += float64(m.GetHistogram().GetSampleCount())
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Untyped != nil:
			total += m.Untyped.GetValue()
		}
	}
	return total
}

// statsDoc is the part of /stats scripts rely on; decoding it here also
// pins the JSON field names.
type statsDoc struct {
	Version string `json:"version"`
	Ready   bool   `json:"ready"`
	Queries struct {
		Total    uint64            `json:"total"`
		BySource map[string]uint64 `json:"by_source"`
		ByRcode  map[string]uint64 `json:"by_rcode"`
	} `json:"queries"`
	Cache struct {
		Entries      uint64  `json:"entries"`
		Capacity     uint64  `json:"capacity"`
		HitRatio     float64 `json:"hit_ratio"`
		Hits         uint64  `json:"hits"`
		Misses       uint64  `json:"misses"`
		StaleAnswers uint64  `json:"stale_answers"`
		Prefetches   uint64  `json:"prefetches"`
		Evictions    uint64  `json:"evictions"`
	} `json:"cache"`
	Inflight struct {
		Now        uint64 `json:"now"`
		Limit      uint64 `json:"limit"`
		Rejections uint64 `json:"rejections"`
	} `json:"inflight"`
	Zones []struct {
		Name             string            `json:"name"`
		Queries          uint64            `json:"queries"`
		StaleAnswers     uint64            `json:"stale_answers"`
		ServFail         uint64            `json:"servfail_answers"`
		UpstreamRequests uint64            `json:"upstream_requests"`
		Errors           map[string]uint64 `json:"upstream_errors"`
		Timeouts         uint64            `json:"upstream_timeouts"`
	} `json:"zones"`
	Upstreams []struct {
		Zone     string            `json:"zone"`
		Server   string            `json:"server"`
		Up       bool              `json:"up"`
		Requests uint64            `json:"requests"`
		Errors   map[string]uint64 `json:"errors"`
		Timeouts uint64            `json:"timeouts"`
	} `json:"upstreams"`
	LastReload *struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	} `json:"last_reload"`
}

func readStats(t *testing.T, admin string) statsDoc {
	t.Helper()
	var s statsDoc
	if err := json.Unmarshal(adminGet(t, admin, "/stats"), &s); err != nil {
		t.Fatalf("decoding /stats: %v", err)
	}
	return s
}

// controlClient sends every request to the control socket at sock.
func controlClient(sock string) *http.Client {
	return &http.Client{Timeout: httpTimeout, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

// controlGet returns the body of GET path over the control socket sock,
// failing on any status but 200.
func controlGet(t *testing.T, sock, path string) []byte {
	t.Helper()
	resp, err := controlClient(sock).Get("http://localhost" + path)
	if err != nil {
		t.Fatalf("GET %s over %s: %v", path, sock, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s over %s: %s, %v\n%s", path, sock, resp.Status, err, body)
	}
	return body
}

// controlPost posts form to path over the control socket sock and returns
// the status and body.
func controlPost(t *testing.T, sock, path string, form url.Values) (int, string) {
	t.Helper()
	resp, err := controlClient(sock).PostForm("http://localhost"+path, form)
	if err != nil {
		t.Fatalf("POST %s over %s: %v", path, sock, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// adminPost posts form to path and returns the status and body.
func adminPost(t *testing.T, admin, path string, form url.Values) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: httpTimeout}
	resp, err := client.PostForm("http://"+admin+path, form)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// lintMetrics runs promlint over an exposition text.
func lintMetrics(t *testing.T, body []byte) {
	t.Helper()
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}
