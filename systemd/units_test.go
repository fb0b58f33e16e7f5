package systemd

import (
	"strings"
	"testing"
)

func TestSocketListensOnBothLoopbacks(t *testing.T) {
	t.Parallel()
	units, err := Units(DefaultBinaryPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(units[0].Content, "\n") {
		lines[l] = true
	}
	for _, want := range []string{"ListenDatagram=127.0.0.1:53", "ListenStream=127.0.0.1:53",
		"ListenDatagram=[::1]:53", "ListenStream=[::1]:53", "FreeBind=yes"} {
		if !lines[want] {
			t.Errorf("%s lacks %q", units[0].Name, want)
		}
	}
}
