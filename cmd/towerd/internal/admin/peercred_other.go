//go:build !linux

package admin

import (
	"errors"
	"net"
)

// peerOf is Linux's SO_PEERCRED elsewhere: not implemented, so the control
// channel refuses every connection rather than trust one unchecked.
func peerOf(net.Conn) (peer, error) {
	return peer{}, errors.New("peer credentials cannot be read on this system")
}
