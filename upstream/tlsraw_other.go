//go:build !(linux && (amd64 || arm64))

package upstream

import "net"

// streamOf is conn itself: raw system calls are Linux's (tlsraw_linux.go).
func streamOf(conn net.Conn) net.Conn { return conn }
