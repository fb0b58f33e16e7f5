//go:build !(linux && (amd64 || arm64))

package resolver

import "syscall"

// sendArgs is unused where there are no raw calls (udpio.RawSend is false): a
// TCP connection's answers are written by its flusher (tcppipe.go).
type sendArgs struct {
	fn func(fd uintptr) bool
}

func (a *sendArgs) now(syscall.RawConn, []byte, []byte) (int, error) { return 0, nil }

func (a *sendArgs) call(uintptr) bool { return true }
