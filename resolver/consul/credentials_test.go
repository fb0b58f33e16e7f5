package consul

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/towerd/towerd/resolver/boundedfile"
)

// TestReadCredentials: the token and CA files, configured or from Consul's
// environment variables, are read by towerd's rule with api's precedence,
// and api is handed their content, never a file name it would read itself
// (issue 21: a FIFO blocks os.ReadFile, /dev/zero never ends).
func TestReadCredentials(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	fileToken, envToken := write("token", " file-token\n"), write("env-token", "env-file-token\n")
	ca := write("ca.pem", "-----BEGIN CERTIFICATE-----\n")
	for _, tt := range []struct {
		name            string
		cfg             Config
		envFile, envTok string
		want            string
		err             error
	}{
		{"configured file wins over a configured token", Config{Token: "cfg", TokenFile: fileToken}, envToken, "", "file-token", nil},
		{"configured token wins over the environment's file", Config{Token: "cfg"}, envToken, "", "cfg", nil},
		{"the environment's file wins over its token", Config{}, envToken, "env", "env-file-token", nil},
		{"the environment's token", Config{}, "", "env", "env", nil},
		{"configured file a FIFO", Config{TokenFile: fifo}, "", "", "", boundedfile.ErrNotRegular},
		{"the environment's file /dev/zero", Config{}, "/dev/zero", "", "", boundedfile.ErrNotRegular},
		{"configured CA a FIFO", Config{TLSCAFile: fifo}, "", "", "", boundedfile.ErrNotRegular},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(api.HTTPTokenFileEnvName, tt.envFile)
			t.Setenv(api.HTTPTokenEnvName, tt.envTok)
			c := api.DefaultConfig()
			if tt.cfg.Token != "" {
				c.Token = tt.cfg.Token // as newClients does
			}
			err := readCredentials(tt.cfg, c)
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err == nil && (c.Token != tt.want || c.TokenFile != "") {
				t.Errorf("token %q, file %q; want %q and no file for api to read", c.Token, c.TokenFile, tt.want)
			}
		})
	}
	c := api.DefaultConfig()
	if err := readCredentials(Config{TLSCAFile: ca}, c); err != nil || string(c.TLSConfig.CAPem) != "-----BEGIN CERTIFICATE-----\n" || c.TLSConfig.CAFile != "" {
		t.Errorf("CA file: %v, pem %q, file %q", err, c.TLSConfig.CAPem, c.TLSConfig.CAFile)
	}
}
