package config

import (
	"strings"
	"testing"
)

// Each bound of [dnstap] is refused with the key that broke it.
func TestDnstapValidate(t *testing.T) {
	long := strings.Repeat("x", MaxDnstapIdentity+1)
	for _, c := range []struct {
		cfg DnstapConfig
		key string // "" = valid
	}{
		{DnstapConfig{}, ""},
		{DnstapConfig{Socket: "/run/dnstap/dnstap.sock", Messages: []string{"client_query", "forwarder_response"}}, ""},
		{DnstapConfig{TCP: "127.0.0.1:6000"}, ""},
		{DnstapConfig{TCP: "[::1]:6000"}, ""},
		{DnstapConfig{Socket: "/run/x.sock", TCP: "127.0.0.1:6000"}, "dnstap.tcp"},
		{DnstapConfig{Socket: "relative.sock"}, "dnstap.socket"},
		{DnstapConfig{Socket: "/run/dnstap/"}, "dnstap.socket"},
		{DnstapConfig{Socket: "/" + strings.Repeat("s", maxSocketPath)}, "dnstap.socket"},
		{DnstapConfig{TCP: "collector.example:6000"}, "dnstap.tcp"},
		{DnstapConfig{TCP: "127.0.0.1"}, "dnstap.tcp"},
		{DnstapConfig{Socket: "/run/x.sock", Identity: long}, "dnstap.identity"},
		{DnstapConfig{Socket: "/run/x.sock", Version: long}, "dnstap.version"},
		{DnstapConfig{Socket: "/run/x.sock", Messages: []string{"resolver_query"}}, "dnstap.messages"},
	} {
		err := c.cfg.validate()
		switch {
		case c.key == "" && err != nil:
			t.Errorf("%+v: %v, want valid", c.cfg, err)
		case c.key != "" && (err == nil || !strings.Contains(err.Error(), c.key)):
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.key)
		}
	}
}
