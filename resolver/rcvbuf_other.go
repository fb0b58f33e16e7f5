//go:build !linux

package resolver

import (
	"errors"
	"syscall"
)

// raiseReceiveBuffer is Linux's (rcvbuf_linux.go); elsewhere the socket
// keeps the system's default.
func raiseReceiveBuffer(syscall.Conn, int) (int, error) {
	return 0, errors.ErrUnsupported
}
