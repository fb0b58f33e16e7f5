// Package udpio reads and writes datagrams on one UDP socket for one
// goroutine, in batches where Linux allows (recvmmsg and sendmmsg issued
// from inside the runtime's poller, raw.go), one at a time elsewhere
// (other.go). The resolver's UDP reader answers cache hits through it; the
// bench's Go floor (test/bench, scenario 15 with -consul-floor) sends every
// datagram back through it, so that the floor is towerd's own I/O without
// the DNS.
package udpio

// Batch is the most datagrams a ReadLoop batch takes from the socket, and
// replies a Flush sends, in one system call.
const Batch = 16

// ReadBuffer takes any datagram: a query larger than 512 bytes (EDNS lets
// clients send big ones) is read whole, not cut.
const ReadBuffer = 65535
