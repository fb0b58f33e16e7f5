//go:build !linux

package admin

import "net"

// hasPendingBytes is Linux's SIOCINQ elsewhere: unknown, so every idle
// connection may be evicted, the oldest first.
func hasPendingBytes(net.Conn) bool { return false }
