package consul

import (
	"context"
	"sort"
	"strings"
	"time"
)

// The catalog mode (Config.Services = ["*"]): the catalog's service list is
// followed and every service in it watched, up to the cap, the first by
// name. For small catalogs only: every catalog write re-ships the whole
// list to every node.

func (w *Watcher) fetchServiceList(ctx context.Context, index uint64) (map[string]string, uint64, error) {
	services, last, err := w.readServices(ctx, index)
	if err != nil {
		return nil, 0, err
	}
	return w.filter(services), last, nil
}

// readServices is one (blocking) read of the catalog's service list: name →
// tags. The catalog mode and the demand mode's list (known.go) read it.
func (w *Watcher) readServices(ctx context.Context, index uint64) (map[string][]string, uint64, error) {
	if err := w.ensureAgent(ctx); err != nil {
		return nil, 0, err
	}
	q, cancel := w.queryOptions(ctx, index)
	defer cancel()
	services, meta, err := w.client.Catalog().Services(q)
	if err != nil {
		return nil, 0, classify(err)
	}
	return services, meta.LastIndex, nil
}

// filter keeps the services the catalog mode watches: lower-case name →
// catalog name.
func (w *Watcher) filter(services map[string][]string) map[string]string {
	out := make(map[string]string, len(services))
	for name, tags := range services {
		if len(w.cfg.Tags) > 0 && !anyFold(w.cfg.Tags, tags) {
			continue
		}
		out[strings.ToLower(name)] = name
	}
	return out
}

// applyServiceList (catalog mode) starts loops for new services and stops
// those of services that left the list (their queries then go to Consul's
// DNS). Past MaxWatches it watches the first services by name and says so.
func (w *Watcher) applyServiceList(list map[string]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key := range w.watches {
		if _, ok := list[key]; !ok {
			w.stopWatch(key, "")
			w.log.Debug("consul watch: service left the catalog", "service", key)
		}
	}
	first := !w.state.Synced
	keys := make([]string, 0, len(list))
	for key := range list {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	capped := len(keys) > w.limit
	if capped != w.state.CatalogCapped {
		w.state.CatalogCapped = capped
		if capped {
			w.log.Warn(`consul watch: the catalog has more services than consul.max_watches; `+
				`consul.services = ["*"] watches only the first ones by name, the rest are answered by `+
				`Consul's DNS. Leave consul.services empty to watch what this node asks for`,
				"catalog_services", len(keys), "max_watches", w.limit)
		}
	}
	for _, key := range keys {
		if _, ok := w.watches[key]; ok {
			continue
		}
		if len(w.watches) >= w.limit {
			break
		}
		w.startWatch(key, list[key], false, time.Time{}, nil)
		if first {
			w.pending[key] = true
		}
	}
	if first {
		w.listed = true
	}
	w.checkSynced()
}
