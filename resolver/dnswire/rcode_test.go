package dnswire

import (
	"testing"

	"github.com/miekg/dns"
)

// An rcode has one name everywhere: its mnemonic, or its number as a
// label when it has none.
func TestRcodeName(t *testing.T) {
	for rcode, want := range map[int]string{
		dns.RcodeSuccess: "NOERROR", dns.RcodeNameError: "NXDOMAIN", dns.RcodeRefused: "REFUSED", 3841: "3841",
	} {
		if got := RcodeName(rcode); got != want {
			t.Errorf("RcodeName(%d) = %q, want %q", rcode, got, want)
		}
	}
}
