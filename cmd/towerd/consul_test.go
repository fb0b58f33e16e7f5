package main

import (
	"io"
	"strings"
	"testing"
	"time"
)


func TestConsulHTTPFlag(t *testing.T) {
	for _, tc := range []struct {
		flag    string
		enabled bool
		address string
	}{
		{"off", false, ""},
		{"127.0.0.1:18500", true, "127.0.0.1:18500"},
		{"unix:///run/consul/http.sock", true, "unix:///run/consul/http.sock"},
	} {
		o, err := parseFlags([]string{"-config", "", "-consul-http", tc.flag}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := o.load()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Consul.Enabled != tc.enabled || cfg.Consul.Address != tc.address {
			t.Errorf("-consul-http %s: enabled %v address %q", tc.flag, cfg.Consul.Enabled, cfg.Consul.Address)
		}
	}
}
