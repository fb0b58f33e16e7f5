package doctor

import (
	"regexp"
	"slices"
	"strings"
)

// goldenSignal is one of the three signals an alert must watch, and the
// series that show it: towerd's own (monitoring/towerd.rules.yml), and
// the usual equivalents (CoreDNS's, consul_exporter's) for a node whose
// alerts predate towerd.
type goldenSignal struct {
	name   string
	series []string // an alert's expression mentions one of these
}

var goldenSignals = []goldenSignal{
	{"resolver failures (SERVFAIL, timeouts)", []string{"towerd_upstream_errors_total", "towerd_upstream_failure_ratio",
		"towerd_upstream_up", "SERVFAIL", "coredns_forward_healthcheck_failures_total"}},
	{"client lookup latency (p99)", []string{"towerd_request_duration_seconds", "coredns_dns_request_duration_seconds"}},
	{"Consul health (check timeouts, the watch)", []string{"towerd_consul_", "consul_health_", "consul_catalog_service_node_healthy"}},
}

// recordingName matches the names of recording rules an expression reads:
// by Prometheus's convention level:metric:operations, and no metric
// scraped from an exporter has a colon.
var recordingName = regexp.MustCompile(`[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]*[a-zA-Z0-9_]`)

func checkMonitoring(n *Node) []Finding {
	r := n.Rules
	if r == nil || r.Err != nil {
		return nil
	}
	var out []Finding
	missing := newFinding("monitoring-signal-missing", Warning, "%d alerting rule(s) in %s", len(r.Alerts), r.Source)
	for _, s := range goldenSignals {
		covered := slices.ContainsFunc(r.Alerts, func(a alertRule) bool {
			return slices.ContainsFunc(s.series, func(series string) bool { return strings.Contains(a.Expr, series) })
		})
		if !covered {
			missing = missing.with(s.name, "no alert reads %s", strings.Join(s.series, ", "))
		}
	}
	if len(missing.Items) > 0 {
		out = append(out, missing)
	}
	unrecorded := newFinding("monitoring-recording-rule-missing", Warning, "%d recording rule(s) in %s", len(r.Records), r.Source)
	for _, a := range r.Alerts {
		for _, name := range recordingName.FindAllString(stripLabelMatchers(a.Expr), -1) {
			if !r.Records[name] {
				unrecorded = unrecorded.with(a.Name, "reads %s, which no recording rule writes", name)
			}
		}
	}
	if len(unrecorded.Items) > 0 {
		out = append(out, unrecorded)
	}
	return out
}

// stripLabelMatchers drops {...} and quoted strings from a PromQL
// expression, where colons are not names (a label value "a:b", a
// duration [5m:1m]).
var labelMatchers = regexp.MustCompile(`\{[^}]*\}|"[^"]*"|\[[^\]]*\]`)

func stripLabelMatchers(expr string) string { return labelMatchers.ReplaceAllString(expr, " ") }
