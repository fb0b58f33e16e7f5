package consul

import (
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/towerd/towerd/resolver/boundedfile"
)

// MaxCredentialSize is the most bytes the ACL token file and the CA file
// may have: a token is a 36-byte UUID, and a CA bundle (Debian's whole
// ca-certificates.crt) about 220 KB.
const MaxCredentialSize = 1 << 20

// credentialRule is how both files are read (issue 21): regular files up
// to MaxCredentialSize, opened without blocking, so a FIFO or /dev/zero
// named as consul.token_file fails the start with an error naming it
// instead of hanging it or filling memory. Links are followed: systemd's
// credentials directory and secret managers use them.
var credentialRule = boundedfile.Rule{MaxSize: MaxCredentialSize}

// ReadCredential reads the token or CA file at path under credentialRule.
func ReadCredential(path string) ([]byte, error) {
	return boundedfile.ReadFile(path, credentialRule)
}

// readToken is the token in the file at path, as api would take it from
// TokenFile: its content without surrounding white space.
func readToken(path string) (string, error) {
	data, err := ReadCredential(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}

// readCredentials reads the token file and the CA file c is to use, the
// configured ones or else the environment's (CONSUL_HTTP_TOKEN_FILE,
// CONSUL_CACERT, which api.DefaultConfig put in c), under credentialRule,
// and hands c their content instead of their names: api would read them
// with os.ReadFile, which a FIFO blocks and /dev/zero never ends. The
// precedence is api's: a configured token file, a configured token, the
// environment's token file, the environment's token.
func readCredentials(cfg Config, c *api.Config) error {
	tokenFile := c.TokenFile
	switch {
	case cfg.TokenFile != "":
		tokenFile = cfg.TokenFile
	case cfg.Token != "":
		tokenFile = ""
	}
	c.TokenFile = ""
	if tokenFile != "" {
		token, err := readToken(tokenFile)
		if err != nil {
			return fmt.Errorf("consul token file: %w", err)
		}
		if token != "" { // as api: an empty file leaves the token as it was
			c.Token = token
		}
	}
	caFile := c.TLSConfig.CAFile
	if cfg.TLSCAFile != "" {
		caFile = cfg.TLSCAFile
	}
	c.TLSConfig.CAFile = ""
	if caFile != "" {
		pem, err := ReadCredential(caFile)
		if err != nil {
			return fmt.Errorf("consul CA file: %w", err)
		}
		c.TLSConfig.CAPem = pem
	}
	return nil
}
