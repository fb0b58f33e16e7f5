package config

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
)

// The [dnstap] table (issue 38): every client question and answer and
// every upstream exchange that ends a resolution, as dnstap, to a
// collector's Unix socket or TCP address. The writer is
// cmd/towerd/internal/dnstap; a reload switches it on, off or elsewhere.

// DnstapMessageTypes are the names of the message types dnstap.messages
// may list, as dnstap.proto names them (lower case).
var DnstapMessageTypes = []string{"client_query", "client_response", "forwarder_query", "forwarder_response"}

// MaxDnstapIdentity bounds dnstap.identity and dnstap.version: they go
// into every message.
const MaxDnstapIdentity = 255

// DnstapConfig is the [dnstap] table.
type DnstapConfig struct {
	// Socket: path of the collector's Unix socket (Frame Streams,
	// bidirectional handshake, content type protobuf:dnstap.Dnstap);
	// "" = none. At most one of socket and tcp.
	Socket string `toml:"socket"`
	// TCP: the collector's ADDRESS:PORT (an IP address, as Frame Streams
	// over TCP); "" = none.
	TCP string `toml:"tcp"`
	// Identity: the dnstap identity field of every message; "" = the
	// host's name.
	Identity string `toml:"identity"`
	// Version: the dnstap version field; "" = "towerd " and its version.
	Version string `toml:"version"`
	// Messages: the message types written, of client_query,
	// client_response, forwarder_query, forwarder_response; empty = all four.
	Messages []string `toml:"messages"`
}

// Enabled reports whether dnstap is on: a socket or an address is set.
func (c DnstapConfig) Enabled() bool { return c.Socket != "" || c.TCP != "" }

func (c DnstapConfig) validate() error {
	if c.Socket != "" && c.TCP != "" {
		return keyErr("dnstap.tcp", "set at most one of dnstap.socket and dnstap.tcp")
	}
	if c.Socket != "" {
		if len(c.Socket) > maxSocketPath {
			return keyErr("dnstap.socket", "%d bytes is longer than a Unix socket path may be (%d)", len(c.Socket), maxSocketPath)
		}
		if !filepath.IsAbs(c.Socket) || strings.HasSuffix(c.Socket, "/") {
			return keyErr("dnstap.socket", "%q is not an absolute path of a socket file", c.Socket)
		}
	}
	if c.TCP != "" {
		if _, err := netip.ParseAddrPort(c.TCP); err != nil {
			return keyErr("dnstap.tcp", "%q is not ADDRESS:PORT with an IP address", c.TCP)
		}
	}
	if len(c.Identity) > MaxDnstapIdentity {
		return keyErr("dnstap.identity", "%d bytes; at most %d", len(c.Identity), MaxDnstapIdentity)
	}
	if len(c.Version) > MaxDnstapIdentity {
		return keyErr("dnstap.version", "%d bytes; at most %d", len(c.Version), MaxDnstapIdentity)
	}
	for _, m := range c.Messages {
		if !slices.Contains(DnstapMessageTypes, m) {
			return keyErr("dnstap.messages", "%q is none of %s", m, strings.Join(DnstapMessageTypes, ", "))
		}
	}
	return nil
}
