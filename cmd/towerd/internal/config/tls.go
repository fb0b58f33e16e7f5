package config

import (
	"crypto/x509"
	"fmt"

	"github.com/towerd/towerd/resolver/boundedfile"
)

// caFileRule reads a zone's tls_ca_file: a site's CA bundle is a few
// certificates; 1 MiB holds hundreds (the system's whole bundle is about
// 200 KiB).
var caFileRule = boundedfile.Rule{MaxSize: 1 << 20}

// TLSRoots are the roots a zone's DNS over TLS servers are verified
// against (issue 37): the certificates of its tls_ca_file, or nil (the
// system's roots) when none is set. A file that is not a PEM bundle of at
// least one certificate is an error naming the key.
func (z ZoneConfig) TLSRoots() (*x509.CertPool, error) {
	if z.TLSCAFile == "" {
		return nil, nil
	}
	data, err := boundedfile.ReadFile(z.TLSCAFile, caFileRule)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", z.TLSCAFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", z.TLSCAFile)
	}
	return pool, nil
}
