package resolver

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// The query log (issue 15): one structured line per answered query, in the
// habit of dnsmasq's log-queries, unbound's log-replies and CoreDNS's log
// plugin. It is off by default and switched at runtime (`towerd
// log-queries`); when it is off, a query pays one atomic load in observe
// (BenchmarkAnswerPacketHit, docs/benchmarks.md).
//
// It never delays an answer (issue 21: with the log's pipe not read, 312 of
// 50,312 queries were answered): its lines go to the daemon's log, whose
// writer hands them to the sink without waiting and drops what the sink
// does not take (cmd/towerd/internal/logsink). And it is bounded: at most
// Config.QueryLogRate lines a second (at 20k q/s it grew 2.8 MB/s); the
// lines past it are dropped and counted in
// towerd_query_log_lines_dropped_total.

// SetLogQueries turns the query log on or off and reports whether it was on.
func (h *Handler) SetLogQueries(on bool) (was bool) { return h.logQueries.Swap(on) }

// LogQueries reports whether the query log is on.
func (h *Handler) LogQueries() bool { return h.logQueries.Load() }

// QueryLogDropped is how many query lines the rate limit dropped.
func (h *Handler) QueryLogDropped() uint64 { return h.queryLines.dropped.Load() }

// lineRate lets through at most a limit of lines in each second of the
// clock: a count per whole second, reset by the first line of the next.
// Lock-free, so the queries that log do not queue on it; two lines that
// see a new second at once may both reset, which lets a few more through.
type lineRate struct {
	second  atomic.Int64 // Unix second of the count
	count   atomic.Int64
	dropped atomic.Uint64
}

// take reports whether one more line may be written at now.
func (l *lineRate) take(now time.Time, limit int) bool {
	sec := now.Unix()
	if old := l.second.Load(); old != sec && l.second.CompareAndSwap(old, sec) {
		l.count.Store(0)
	}
	if l.count.Add(1) > int64(limit) {
		l.dropped.Add(1)
		return false
	}
	return true
}

// newQueryLog is where query lines go: the handler's log, at info whatever
// log_level says. An operator who turns the log on wants the lines, and
// log_level = "warn" on a busy node must not swallow them silently.
func newQueryLog(log *slog.Logger) *slog.Logger {
	return slog.New(alwaysEnabled{log.Handler()})
}

// alwaysEnabled passes every record to its handler: slog.Logger asks
// Enabled before Handle, and the standard handlers do not ask again.
type alwaysEnabled struct{ slog.Handler }

func (alwaysEnabled) Enabled(context.Context, slog.Level) bool { return true }

func (a alwaysEnabled) WithAttrs(attrs []slog.Attr) slog.Handler {
	return alwaysEnabled{a.Handler.WithAttrs(attrs)}
}

func (a alwaysEnabled) WithGroup(name string) slog.Handler {
	return alwaysEnabled{a.Handler.WithGroup(name)}
}

// logQuery writes q's line: who asked what, what they got, from where, how
// fast. The name is copied: on the fast path it aliases a reused buffer.
func (h *Handler) logQuery(r *request, q Query) {
	qtype, ok := dns.TypeToString[q.Qtype]
	if !ok {
		qtype = dns.Type(q.Qtype).String() // "TYPE65280"
	}
	attrs := make([]slog.Attr, 0, 9)
	attrs = append(attrs,
		slog.String("client", r.client.Unmap().String()),
		slog.String("name", strings.Clone(strings.ToLower(dns.Fqdn(r.qname)))),
		slog.String("type", qtype),
		slog.String("rcode", dnswire.RcodeName(q.Rcode)),
		slog.String("source", q.Source),
	)
	if q.Server != "" {
		attrs = append(attrs, slog.String("upstream", q.Server))
	}
	attrs = append(attrs,
		slog.String("zone", q.Zone),
		slog.String("proto", q.Proto),
		slog.Duration("duration", q.Duration),
	)
	h.queryLog.LogAttrs(context.Background(), slog.LevelInfo, "query", attrs...)
}
