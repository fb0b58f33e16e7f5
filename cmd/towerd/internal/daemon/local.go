package daemon

import (
	"context"
	"fmt"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/resolver/local"
)

// newLocal builds the local data source of cfg's [local] table (issue 15):
// it reads the hosts files now, so a reload (SIGHUP) re-reads them. The
// configured zones are its forwarded zones: one longer than an address or
// local domain wins, and bogus_priv leaves a reverse zone with servers of
// its own alone.
func (d *Daemon) newLocal(cfg config.Config, zones []config.ZoneConfig) (*local.Source, error) {
	records, err := cfg.Local.ParseRecords()
	if err != nil {
		return nil, err // validated already; kept for callers that did not
	}
	addrs, err := cfg.Local.ParseAddresses()
	if err != nil {
		return nil, err
	}
	o := local.Options{
		HostsFiles:   cfg.Local.HostsFiles,
		Records:      records,
		Domains:      cfg.Local.Domains,
		DomainNeeded: cfg.Local.DomainNeeded,
		BogusPriv:    cfg.Local.BogusPriv,
		TTL:          cfg.Local.TTL.Duration,
		Log:          d.log,
		Replaces:     d.local.Load(), // nil at start: a reload keeps what it read last
	}
	for i, a := range cfg.Local.Address {
		o.Addresses = append(o.Addresses, local.Address{Domain: a.Name, Addrs: addrs[i]})
	}
	for _, z := range zones {
		o.Forwarded = append(o.Forwarded, z.Name)
	}
	src, err := local.New(o)
	if err != nil {
		return nil, fmt.Errorf("[local]: %w", err)
	}
	return src, nil
}

// records is the handler's Records: local data first, then the Consul
// watch.
func (d *Daemon) records(src *local.Source) resolver.Chain {
	chain := resolver.Chain{{RecordSource: src, Label: resolver.SourceLocal}}
	if d.consul != nil { // a nil *Watcher must not become a non-nil interface
		chain = append(chain, resolver.ChainSource{RecordSource: d.consul, Label: resolver.SourceRecords})
	}
	return chain
}

// runLocal polls the running local source's hosts files until stopLocal.
func (d *Daemon) runLocal() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// Armed before runLocal returns: a test on the fake clock that steps
	// it once towerd is ready steps this ticker.
	tick, ticks := d.opts.Clock.NewTicker(local.DefaultPollInterval)
	go func() {
		defer close(done)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticks:
				if src := d.local.Load(); src != nil {
					src.Poll()
				}
			}
		}
	}()
	d.stopLocalPoll = func() { cancel(); <-done }
}

func (d *Daemon) stopLocal() {
	if d.stopLocalPoll != nil {
		d.stopLocalPoll()
		d.stopLocalPoll = nil
	}
}
