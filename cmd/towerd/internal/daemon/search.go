package daemon

import (
	"errors"
	"io/fs"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/resolvconf"
	"github.com/towerd/towerd/resolver"
)

// The search lists of the handler's search-list rules (issue 28): the
// node's own, the search (or domain) line and options ndots of
// search.resolv_conf (/etc/resolv.conf: the file glibc, Go's resolver and
// musl read on the node, which towerd install writes keeping the lines it
// replaced), then the [[search.list]] tables of clients that read another
// file, containers above all. A query carries nothing that says which
// list its client walks; a list that is wrong only costs the questions
// asked ahead for nothing, never an answer (docs/resolving.md).

// searchState is what the daemon keeps of the lists: the node's last good
// one, and the lists the handler runs with and is about to.
type searchState struct {
	node          *resolver.SearchList // nil: none read yet, or the file has no search line
	running, next []resolver.SearchList
}

// searchLists are cfg's lists, the node's first. The node's file is read
// again (start, reload): a missing file or one without a search line
// means none, as for glibc, and so does a list past the resolver's bounds
// (with a warning); a file that cannot be read as a bounded regular file
// keeps the last good list, with a warning.
func (d *Daemon) searchLists(cfg config.Config) []resolver.SearchList {
	if !cfg.Search.Enabled {
		return nil
	}
	var lists []resolver.SearchList
	if path := cfg.Search.ResolvConf; path != "" {
		rc, err := resolvconf.Read(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			d.search.node = nil
		case err != nil:
			d.log.Warn("the node's search list cannot be read; the last one read stays", "file", path, "err", err)
		case len(rc.Search) == 0:
			d.search.node = nil
		default:
			l := resolver.SearchList{Domains: rc.Search, Ndots: resolvconf.Ndots(rc.Options)}
			if err := resolver.CheckSearchList(l); err != nil {
				// Content past the bounds, not a read that failed: none.
				d.log.Warn("the node's search list is not used", "file", path, "search", strings.Join(rc.Search, " "), "err", err)
				d.search.node = nil
				break
			}
			d.search.node = &l
		}
		if d.search.node != nil {
			lists = append(lists, *d.search.node)
		}
	}
	for _, l := range cfg.Search.Lists {
		lists = append(lists, l.List()) // validated
	}
	return lists
}
