package consul

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Admission by use (issue 24). A watch costs the servers one first read and
// a streaming view at the agent (one stream at a server), and pays for
// itself with every question it answers that would otherwise reach the
// agent's DNS (one RPC each, since Consul's records carry TTL 0). So:
//
//   - A name is considered for a watch from its second question within
//     IdleTimeout (TinyLFU's "doorkeeper"): a name asked once — a cron job,
//     a typo, a flood of random names — costs what it costs without the
//     watch, one agent DNS question.
//   - With room in the set it is read once (a probe, index 0: no view at the
//     agent yet) and watched only if that read found instances: a name that
//     is no service, or has no healthy instance, holds no watch and no place
//     in the set. It is kept out for a while (emptyHold), its questions
//     answered by the agent's DNS.
//   - With the set full it displaces the watched service asked least often
//     only if it is asked clearly more often (frequency over a window,
//     halved every Config.Window). A set larger than the cap keeps its most
//     asked services watched and sends the rest to the agent's DNS, instead
//     of starting and stopping watches in turn as least-recently-used
//     eviction does (a cyclic set one larger than the cap then never hits).
//   - No start may make the agent hold more than MaxWatches + viewMargin
//     streaming views for this node: the agent keeps a view for
//     agentViewTTL after its last query ended, so a watch ended recently
//     still costs a stream (see recent in Watcher).

// hitUnit is one question in the decayed counts: fixed point, so that
// halving keeps fractions of a question.
const hitUnit = 16

// maxCandidates bounds the table of names asked for but not watched (about
// 1.5 MB when full); past it the least recently asked is forgotten, its
// count starting again. A node that cycles through more names than this
// between two questions for one of them watches none of those: it pays
// what it would without the watch.
const maxCandidates = 4096

// agentViewTTL is how long a Consul agent keeps a streaming view (and its
// subscription at a server) after the last blocking query for it ended:
// idleTTL in agent/submatview/store.go, 20 minutes in Consul 1.10–1.14.
const agentViewTTL = 20 * time.Minute

// emptyHold is how long a name whose read found no instance is kept out of
// the set; it doubles with each further empty read, up to IdleTimeout.
const emptyHold = 30 * time.Second

// DefaultWindow is the half-life of the question counts.
const DefaultWindow = 5 * time.Minute

// DefaultEmptyGrace is how long a watched service whose instances all went
// away keeps its watch, so that one coming back is seen at once.
const DefaultEmptyGrace = time.Minute

// viewMargin is how many streaming views past MaxWatches the watch may
// cause the agent to hold for this node (watches ended within agentViewTTL):
// the number of services that may change places in the set per 20 minutes.
func viewMargin(maxWatches int) int { return max(maxWatches/4, 2) }

// outranks reports whether a candidate asked hits times displaces a watch
// asked victim times: by more than a quarter and one question, so services
// asked equally often (a cyclic set) never change places.
func outranks(hits, victim int64) bool { return hits > victim+victim/4+hitUnit }

// candidate is a name asked for but not watched.
type candidate struct {
	hits      int64     // decayed count, hitUnit per question
	lastAsked time.Time // the doorkeeper's memory
	// emptyUntil keeps the name out of the set: its last read found no
	// instance. empties counts such reads in a row; the hold doubles.
	emptyUntil time.Time
	empties    int
	// reading: a name read empty before is read again, until then (set
	// when its questions asked for the read): its questions stay with the
	// cache meanwhile (Covers), as while it was kept out, instead of each
	// reaching Answer until the read ends (a thousand names whose holds
	// end together would otherwise leave the fast path for the seconds
	// their reads take, one at a time).
	reading time.Time
}

// candidates is the bounded table of names asked for but not watched. It
// has its own lock: Answer counts questions in it without w.mu (taken
// after w.mu, never before).
type candidates struct {
	mu    sync.RWMutex
	table *simplelru.LRU[string, *candidate]
}

func newCandidates() *candidates {
	table, err := simplelru.NewLRU[string, *candidate](maxCandidates, nil)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return &candidates{table: table}
}

// ask counts a question for key at now and reports whether the name may be
// considered for a watch: asked before within idle, and not kept out.
func (c *candidates) ask(key string, now time.Time, idle time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(key, true)
	seen := !e.lastAsked.IsZero() && now.Sub(e.lastAsked) < idle
	e.hits += hitUnit
	e.lastAsked = now
	consider := seen && !now.Before(e.emptyUntil)
	if consider && e.empties > 0 {
		// Read empty before: read again now, its questions left with the
		// cache meanwhile. A read not made by then is asked for again.
		e.reading = now.Add(emptyHold)
	}
	return consider
}

// hits returns key's count and whether it is kept out at now.
func (c *candidates) hits(key string, now time.Time) (hits int64, keptOut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.table.Peek(key)
	if !ok {
		return 0, false
	}
	return e.hits, now.Before(e.emptyUntil)
}

// keptOutNow reports whether key is kept out at now, counting nothing
// and moving nothing: Covers asks it of every question for a name not
// watched (key may alias a packet; it is only looked up).
func (c *candidates) keptOutNow(key string, now time.Time) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.table.Peek(key)
	return ok && (now.Before(e.emptyUntil) || now.Before(e.reading))
}

// take removes key (it is watched now) and returns its count.
func (c *candidates) take(key string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.table.Peek(key)
	if !ok {
		return 0
	}
	c.table.Remove(key)
	return e.hits
}

// put records a service whose watch ended, with its count and last
// question, so it competes again on what it was asked.
func (c *candidates) put(key string, hits int64, lastAsked time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(key, false)
	e.hits, e.lastAsked = hits, lastAsked
}

// entry returns key's candidate, added if missing; asked moves it to the
// front of the table (a question), else its place stays. Callers hold
// c.mu.
func (c *candidates) entry(key string, asked bool) *candidate {
	get := c.table.Peek
	if asked {
		get = c.table.Get
	}
	e, ok := get(key)
	if !ok {
		e = &candidate{}
		c.table.Add(key, e)
	}
	return e
}

// keepOut marks key as found without instances at now: kept out for
// emptyHold, doubling with each empty read in a row, up to longest.
func (c *candidates) keepOut(key string, now time.Time, longest time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(key, false)
	if e.lastAsked.IsZero() {
		e.lastAsked = now
	}
	hold := emptyHold
	for i := 0; i < e.empties && hold < longest; i++ {
		hold *= 2
	}
	e.empties++
	e.emptyUntil = now.Add(min(hold, max(longest, emptyHold)))
	e.reading = time.Time{}
}

// letIn ends key's hold: a service of that name has appeared (known.go).
// Its count of empty reads starts again.
func (c *candidates) letIn(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.table.Peek(key); ok {
		e.emptyUntil, e.empties, e.reading = time.Time{}, 0, time.Time{}
	}
}

// readDone ends key's read without a verdict (an error, a refusal): its
// questions count again.
func (c *candidates) readDone(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.table.Peek(key); ok {
		e.reading = time.Time{}
	}
}

// decay halves every count: the window's half-life.
func (c *candidates) decay() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.table.Values() {
		e.hits /= 2
	}
}

// keptOut counts the names kept out at now.
func (c *candidates) keptOut(now time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.table.Values() {
		if now.Before(e.emptyUntil) {
			n++
		}
	}
	return n
}

// Refusal reasons, as counted in State and the metrics.
const (
	refusedPinned    = "pinned"    // the set is full of pinned services
	refusedFrequency = "frequency" // not asked more often than the least asked watch
	refusedStreams   = "streams"   // the agent would hold more views than MaxWatches + viewMargin
)

// admission decides whether key, asked hits times, may be watched now, and
// which watch makes room for it ("" = none needed). reason says why not.
// Callers hold w.mu.
func (w *Watcher) admission(key string, hits int64) (victim, reason string) {
	if w.viewsWith(key) > w.cfg.MaxWatches+viewMargin(w.cfg.MaxWatches) {
		return "", refusedStreams
	}
	if len(w.watches) < w.limit {
		return "", ""
	}
	victim, ok := w.weakest()
	if !ok {
		return "", refusedPinned
	}
	if !outranks(hits, w.watches[victim].hits.Load()) {
		return "", refusedFrequency
	}
	return victim, ""
}

// viewsWith is how many streaming views the agent would hold for this node
// with key watched too: a view per watch (counting those not blocking yet)
// and per watch ended within agentViewTTL, less key's own if it lingers (a
// new watch of it reuses the view). Callers hold w.mu.
func (w *Watcher) viewsWith(key string) int {
	n := len(w.watches) + len(w.recent) + 1
	if _, ok := w.recent[key]; ok {
		n--
	}
	return n
}

// weakest returns the watch asked least often (of those least often, the
// one asked longest ago) among those that may make room: not pinned, and
// past their first read. Callers hold w.mu.
func (w *Watcher) weakest() (string, bool) {
	var victim *serviceLoop
	var vkey string
	for k, sl := range w.watches {
		if sl.pinned || !sl.confirmed {
			continue
		}
		if victim == nil || sl.hits.Load() < victim.hits.Load() ||
			(sl.hits.Load() == victim.hits.Load() && w.lastAsked(sl) < w.lastAsked(victim)) {
			victim, vkey = sl, k
		}
	}
	return vkey, victim != nil
}

// refuse counts an admission refused for reason. Callers hold w.mu.
func (w *Watcher) refuse(key, reason string) {
	switch reason {
	case refusedPinned:
		w.state.RefusedPinned++
	case refusedFrequency:
		w.state.RefusedFrequency++
	case refusedStreams:
		w.state.RefusedStreams++
	}
	w.cands.readDone(key)
	w.log.Debug("consul watch: not watching a service asked for", "service", key, "reason", reason)
}

// decay halves the counts of watches and candidates once per window, and
// forgets the views the agent has let go. Callers hold w.mu.
func (w *Watcher) decay(now time.Time) {
	for k, at := range w.recent {
		if now.Sub(at) >= agentViewTTL {
			delete(w.recent, k)
		}
	}
	if now.Before(w.nextDecay) {
		return
	}
	w.nextDecay = now.Add(w.cfg.Window)
	for _, sl := range w.watches {
		sl.hits.Add(-sl.hits.Load() / 2)
	}
	w.cands.decay()
}
