package daemon

import (
	"os"
	"slices"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/dnstap"
	"github.com/towerd/towerd/resolver"
)

// dnstap (issue 38): the writer of the running configuration's [dnstap]
// table, and the one a reload being prepared made. A reload that leaves
// the table alone keeps the writer and its connection; one that changes
// it starts a new writer before the handler takes it and ends the old one
// after. Stats outlive the writers.
type dnstapState struct {
	stats   *dnstap.Stats
	cfg     config.DnstapConfig
	running *dnstap.Writer // nil: off
	next    *dnstap.Writer // made for a reload not applied yet
	nextCfg config.DnstapConfig
	made    bool // next is the reload's (it may be nil: off)
}

// dnstapClose bounds how long a writer being replaced or stopped may take
// to hand its last messages to the reader.
const dnstapClose = 2 * time.Second

// dnstapTap returns the Tap for cfg's [dnstap]: the running writer when
// the table did not change, else a new one, started, kept as next until
// applyDnstap. nil when dnstap is off.
func (d *Daemon) dnstapTap(cfg config.Config) resolver.Tap {
	st := &d.dnstap
	if d.handler != nil && sameDnstap(cfg.Dnstap, st.cfg) {
		return tapOf(st.running)
	}
	if st.made && sameDnstap(cfg.Dnstap, st.nextCfg) {
		return tapOf(st.next)
	}
	d.discardDnstap()
	st.made, st.nextCfg, st.next = true, cfg.Dnstap, nil
	if !cfg.Dnstap.Enabled() {
		return nil
	}
	w, err := dnstap.New(d.dnstapOptions(cfg.Dnstap), st.stats)
	if err != nil { // unreachable: validated
		d.log.Error("BUG: dnstap settings rejected after validation", "err", err)
		return nil
	}
	w.Start()
	st.next = w
	return w
}

// tapOf keeps a nil writer a nil Tap (not an interface holding nil).
func tapOf(w *dnstap.Writer) resolver.Tap {
	if w == nil {
		return nil
	}
	return w
}

// applyDnstap makes the writer dnstapTap made for the configuration the
// handler took the running one, and ends the one it replaces once the
// queries answered under the old configuration have handed it theirs.
func (d *Daemon) applyDnstap(cfg config.Config) {
	st := &d.dnstap
	if !st.made {
		return
	}
	old := st.running
	st.running, st.cfg, st.next, st.made = st.next, st.nextCfg, nil, false
	if old != nil {
		go old.Close(dnstapClose)
	}
	if !sameDnstap(cfg.Dnstap, st.cfg) {
		d.log.Error("BUG: dnstap writer made for another configuration")
	}
}

// discardDnstap ends a writer made for a reload that was not applied.
func (d *Daemon) discardDnstap() {
	st := &d.dnstap
	if st.next != nil {
		go st.next.Close(0)
	}
	st.next, st.made = nil, false
}

// stopDnstap ends the running writer at shutdown, after the last answer.
func (d *Daemon) stopDnstap() {
	d.discardDnstap()
	if d.dnstap.running != nil {
		d.dnstap.running.Close(dnstapClose)
		d.dnstap.running = nil
	}
}

func (d *Daemon) dnstapOptions(c config.DnstapConfig) dnstap.Options {
	o := dnstap.Options{Network: "unix", Address: c.Socket, Identity: c.Identity, Version: c.Version, Log: d.log}
	if c.TCP != "" {
		o.Network, o.Address = "tcp", c.TCP
	}
	if o.Identity == "" {
		o.Identity, _ = os.Hostname()
	}
	if o.Version == "" {
		o.Version = "towerd " + d.opts.Version
	}
	for _, m := range c.Messages {
		o.Types = append(o.Types, dnstap.MessageType(5+slices.Index(config.DnstapMessageTypes, m)))
	}
	return o
}

func sameDnstap(a, b config.DnstapConfig) bool {
	return a.Socket == b.Socket && a.TCP == b.TCP && a.Identity == b.Identity && a.Version == b.Version &&
		slices.Equal(a.Messages, b.Messages)
}
