package config

import (
	"fmt"

	"github.com/towerd/towerd/cmd/towerd/internal/resolvconf"
	"github.com/towerd/towerd/resolver"
)

// SearchConfig is the [search] table: search-list lookups (issue 28). A
// lookup whose search expansions do not exist asks its later names
// ahead, in parallel, and gets their NXDOMAINs without waiting
// (docs/resolving.md, "Search lists").
type SearchConfig struct {
	// Enabled: ask a lookup's later search-list names ahead and answer its
	// later tries with what they brought.
	Enabled bool `toml:"enabled"`
	// Hold: how long after it came the upstream's NXDOMAIN for a search
	// expansion answers again, for a lookup that ends at a name the node
	// knows (and for a lookup's later tries); "0s" = never past the try
	// that asked it. At most 5s.
	Hold Duration `toml:"hold"`
	// ResolvConf: the file whose search (or domain) line and options ndots
	// are the node's search list, read at start and on reload; "" = none.
	ResolvConf string `toml:"resolv_conf"`
	// Lists: the search lists of clients that read another resolv.conf
	// (containers), each its domains in order and its ndots.
	Lists []SearchListConfig `toml:"list"`
}

// SearchListConfig is one [[search.list]] table.
type SearchListConfig struct {
	// Domains: the search domains, in the order the clients try them.
	Domains []string `toml:"domains"`
	// Ndots: the clients' options ndots; unset = 1 (glibc's default;
	// Kubernetes pods have 5).
	Ndots *int `toml:"ndots"`
}

// DefaultSearchResolvConf is the file glibc reads on the node.
const DefaultSearchResolvConf = "/etc/resolv.conf"

func defaultSearchConfig() SearchConfig {
	return SearchConfig{Enabled: true, Hold: Dur(resolver.DefaultSearchHold), ResolvConf: DefaultSearchResolvConf}
}

// List is l as the resolver takes it.
func (l SearchListConfig) List() resolver.SearchList {
	ndots := resolvconf.DefaultNdots
	if l.Ndots != nil {
		ndots = *l.Ndots
	}
	return resolver.SearchList{Domains: l.Domains, Ndots: ndots}
}

func (c SearchConfig) validate() error {
	if c.Hold.Duration < 0 || c.Hold.Duration > resolver.MaxSearchHold {
		return keyErr("search.hold", "must be between 0s and %v (got %v)", resolver.MaxSearchHold, c.Hold)
	}
	if len(c.Lists) > resolver.MaxSearchLists-1 {
		return keyErr("search.list", "at most %d lists besides the node's (got %d)", resolver.MaxSearchLists-1, len(c.Lists))
	}
	for i, l := range c.Lists {
		key := fmt.Sprintf("search.list[%d]", i)
		if len(l.Domains) == 0 {
			return keyErr(key+".domains", "needs at least one domain")
		}
		if err := resolver.CheckSearchList(l.List()); err != nil {
			return keyErr(key, "%v", err)
		}
	}
	return nil
}
