package consul

import (
	"context"
	"errors"
	"maps"
	"strings"
	"time"
)

// The service list (demand mode). A name asked twice is read once, and one
// that is no service is kept out for a hold that doubles up to IdleTimeout
// (admit.go): each such name costs the agent a read per hold, and each hold
// that ends sends its next question through Answer and a read again. A
// node asked for many names the agent does not have (a typo in a fleet's
// config, a job enumerating names, a benchmark) pays that in waves: a
// thousand such names cost a thousand reads every hold, and those reads
// cost towerd more CPU than the questions they stand beside (make bench,
// scenario 15, issue 34: 6 µs per answer during a wave).
//
// So past listAfter names kept out at once the watch follows the catalog's
// service list (one blocking query, /v1/catalog/services, as the catalog
// mode does), and a name whose service is not in it is neither counted nor
// read: Covers leaves it to the cache and Consul's DNS at the cost of one
// map lookup, and no hold ever ends for it. A service registered later is
// in the next list, and its next questions count. Below listAfter nothing
// changes: the list re-ships on every catalog write to every node that
// follows it, which a node asking for a few unknown names should not pay.
// A list that breaks a bound (too large, refused by the ACL) ends the
// following: names are read one by one again.

// listAfter is how many names kept out at once make the watch follow the
// catalog's service list.
const listAfter = 64

// knownServices is the catalog's service list: lower-case names.
type knownServices map[string]struct{}

// known reports whether key may be a service the agent has: in the list,
// or any name while the watch does not follow it. key may alias a packet:
// it is only looked up.
func (w *Watcher) known(key string) bool {
	list := w.knownList.Load()
	if list == nil {
		return true
	}
	_, ok := (*list)[key]
	return ok
}

// followList starts following the service list once listAfter names are
// kept out at now, if it does not yet (demand mode). Callers hold w.mu.
func (w *Watcher) followList(now time.Time) {
	if w.following || w.cfg.watchAll() || w.runCtx == nil || w.runCtx.Err() != nil ||
		w.cands.keptOut(now) < listAfter {
		return
	}
	w.following = true
	ctx := w.runCtx
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.runKnown(ctx)
	}()
}

// runKnown follows the service list until ctx ends or the list breaks a
// bound. Across an outage of the agent (a restart, an upgrade) the loop
// waits at the agent's gate with the watches (gate.go) rather than on a
// backoff of its own: one probe at a time for all of them, and when the
// agent answers again the list is read anew at once, at index 0 (the
// restarted agent's index may be lower than the last one: loop.go), so a
// service registered meanwhile is listed and one gone is not, within the
// gate's probe interval of the agent's return instead of after a backoff
// of up to BackoffMax.
func (w *Watcher) runKnown(ctx context.Context) {
	probed := false // this loop holds the gate's probe turn
	var sent uint64 // the gate's generation when the list's query was sent
	gate := w.retryAfter(&probed, &sent)
	l := &loop[knownServices]{
		timing: w.cfg.Timing,
		clock:  w.clock,
		jitter: w.jitter,
		fetch: func(ctx context.Context, index uint64) (knownServices, uint64, error) {
			sent = w.gate.generation()
			return w.fetchKnown(ctx, index)
		},
		equal:   func(a, b knownServices) bool { return maps.Equal(a, b) },
		deliver: w.deliverKnown,
		contact: func(index uint64) {
			probed = false
			w.answered(index, sent)
		},
		failure: func(err error, n int) {
			if !endsFollowing(err) { // that one is said below
				w.listFailure(err, n)
			}
		},
	}
	l.retry = func(ctx context.Context, err error, n int) error {
		if endsFollowing(err) {
			// It will not get better by asking again: back to reading
			// names one by one.
			w.knownList.Store(nil)
			w.log.Warn("consul watch: cannot follow the catalog's service list; reading names one by one",
				"err", err)
			return err
		}
		// Meanwhile the last list stands: a service missing from it is
		// answered by Consul's DNS, as before its watch.
		return gate(ctx, err, n)
	}
	l.run(ctx)
	if probed {
		w.gate.giveBack() // the loop ended holding the probe's turn
	}
}

// endsFollowing reports whether the list's query failed in a way asking
// again will not mend: a list past the body bound, or one the token may
// not read.
func endsFollowing(err error) bool {
	return errors.Is(err, ErrBodyTooLarge) || errors.Is(err, ErrACL)
}

// deliverKnown takes a new service list. A name kept out after an empty
// read that the list now names (registered since, or back after an
// agent's restart) is let in again: its next questions ask for a read
// instead of waiting out a hold of up to IdleTimeout. Names listed before
// keep their holds (a listed service with no healthy instance).
func (w *Watcher) deliverKnown(list knownServices) {
	old := w.knownList.Swap(&list)
	if old == nil {
		w.log.Info("consul watch: many names asked for are no service; following the catalog's "+
			"service list, names it lacks are left to Consul's DNS", "kept_out", listAfter,
			"services", len(list))
		return
	}
	for key := range list {
		if _, ok := (*old)[key]; !ok {
			w.cands.letIn(key)
		}
	}
}

// fetchKnown reads the catalog's service list.
func (w *Watcher) fetchKnown(ctx context.Context, index uint64) (knownServices, uint64, error) {
	services, last, err := w.readServices(ctx, index)
	if err != nil {
		return nil, 0, err
	}
	list := make(knownServices, len(services))
	for name := range services {
		list[strings.ToLower(name)] = struct{}{}
	}
	return list, last, nil
}
