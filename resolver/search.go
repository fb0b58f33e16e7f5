package resolver

import "strings"

// SearchList is one search list (issue 28): the search domains of a
// resolv.conf, in order, and its ndots.
type SearchList struct {
	// Domains are the search domains in the order the client tries them,
	// with or without a final dot.
	Domains []string
	// Ndots is resolv.conf's options ndots: a name with at least this many
	// dots is tried as it is before the search domains (glibc's default 1).
	Ndots int
}

// Tries are the names glibc's res_search asks for name, in order (glibc's
// resolv/res_query.c, which Go's resolver and musl follow for a name below
// ndots): as it is first when it has at least ndots dots, then under each
// search domain, then as it is when that was not tried first. A name with
// a final dot is asked only as it is. towerd doctor prices a search list
// with it.
func (l SearchList) Tries(name string) []string {
	if strings.HasSuffix(name, ".") {
		return []string{name}
	}
	asIsFirst := strings.Count(name, ".") >= l.Ndots
	var tries []string
	if asIsFirst {
		tries = append(tries, name)
	}
	for _, d := range l.Domains {
		if d = strings.Trim(d, "."); d != "" {
			tries = append(tries, name+"."+d)
		}
	}
	if !asIsFirst {
		tries = append(tries, name)
	}
	return tries
}

