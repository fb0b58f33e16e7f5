package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestConsulConfig(t *testing.T) {
	cfg, err := LoadConfig("", true)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Consul; !c.Enabled || c.Address != "" || c.AnswerTTL.Duration != 0 || len(c.Services) != 0 ||
		c.MaxWatches != 64 || c.IdleTimeout.Duration != 30*time.Minute {
		t.Errorf("default [consul] %+v: want enabled, address from the environment, TTL 0, none pinned, 64 watches, 30m idle", c)
	}

	token := writeFile(t, "token", "secret\n")
	path := writeFile(t, "towerd.toml", `
[consul]
address    = "127.0.0.1:8501"
scheme     = "https"
token_file = "`+token+`"
datacenter = "dc2"
services   = ["web", "db"]
tags       = ["dns"]
answer_ttl = "5s"
max_watches = 20
idle_timeout = "10m"
`)
	cfg, err = LoadConfig(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Consul; c.Address != "127.0.0.1:8501" || c.Scheme != "https" || c.TokenFile != token ||
		c.Datacenter != "dc2" || len(c.Services) != 2 || c.Tags[0] != "dns" || c.AnswerTTL.Duration != 5*time.Second ||
		c.MaxWatches != 20 || c.IdleTimeout.Duration != 10*time.Minute {
		t.Errorf("[consul] read as %+v", c)
	}

	for _, tc := range []struct{ name, body, want string }{
		{"scheme", "[consul]\nscheme = \"ftp\"\n", `towerd.toml:2: key "consul.scheme"`},
		{"both tokens", "[consul]\ntoken = \"a\"\ntoken_file = \"" + token + "\"\n", `key "consul.token_file": set consul.token or consul.token_file, not both`},
		{"token file", "[consul]\ntoken_file = \"/nonexistent/token\"\n", `key "consul.token_file": cannot be read`},
		{"ca file", "[consul]\ntls_ca_file = \"/nonexistent/ca.pem\"\n", `key "consul.tls_ca_file": cannot be read`},
		{"fractional ttl", "[consul]\nanswer_ttl = \"1.5s\"\n", `key "consul.answer_ttl": DNS TTLs are whole seconds`},
		{"negative ttl", "[consul]\nanswer_ttl = \"-1s\"\n", `key "consul.answer_ttl"`},
		{"empty service", "[consul]\nservices = [\"web\", \" \"]\n", `key "consul.services[1]"`},
		{"unknown key", "[consul]\nadress = \"x\"\n", `key "consul.adress": unknown key`},
		{"max_watches 0", "[consul]\nmax_watches = 0\n", `key "consul.max_watches": must be between 1 and 150`},
		{"max_watches past the agent's limit", "[consul]\nmax_watches = 190\n", `key "consul.max_watches"`},
		{"more pins than watches", "[consul]\nmax_watches = 1\nservices = [\"a\", \"b\"]\n", `key "consul.services": 2 pinned services exceed`},
		{"star with others", "[consul]\nservices = [\"*\", \"web\"]\n", `key "consul.services[0]": "*"`},
		{"idle_timeout", "[consul]\nidle_timeout = \"10ms\"\n", `key "consul.idle_timeout": must be at least 1s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfig(writeFile(t, "towerd.toml", tc.body), false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}

	// A disabled watch is not validated: its keys may wait for later.
	if _, err := LoadConfig(writeFile(t, "towerd.toml", "[consul]\nenabled = false\nscheme = \"ftp\"\n"), false); err != nil {
		t.Errorf("disabled watch: %v", err)
	}
}

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

	// An address never turns on a watch the configuration turned off.
	path := writeFile(t, "towerd.toml", "[consul]\nenabled = false\n")
	o, err := parseFlags([]string{"-config", path, "-consul-http", "127.0.0.1:18500"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.load()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Consul.Enabled {
		t.Error("-consul-http turned on the watch that consul.enabled = false turned off")
	}
}
