package dnswire

import (
	"strconv"

	"github.com/miekg/dns"
)

// RcodeName is an rcode's mnemonic ("NXDOMAIN", from dns.RcodeToString),
// or its number for an rcode without one ("3841"): the one name of an
// rcode in towerd's errors, refusal reasons, query log and metric labels.
func RcodeName(rcode int) string {
	if name, ok := dns.RcodeToString[rcode]; ok {
		return name
	}
	return strconv.Itoa(rcode)
}
