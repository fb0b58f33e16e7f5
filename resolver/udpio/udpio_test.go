package udpio

import (
	"net"
	"testing"
	"time"
)

// ReadLoop waits in the poller at once after a batch smaller than Batch,
// without reading to be told EAGAIN (raw.go). A datagram left in the
// socket while it waits would wait for the next one to arrive: with nothing
// after it, forever. Each burst here is queued in full before the loop
// starts (loopback delivers within the sender's write), so the first read
// meets them all and the poller's edge is already spent; every burst size
// around the batch size is read whole, and a datagram sent while a batch
// is being handled is read too.
func TestReadLoopLeavesNoDatagramWaiting(t *testing.T) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io, err := New(conn)
	if err != nil {
		t.Fatal(err)
	}
	send, err := net.DialUDP("udp", nil, conn.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	for burst := 1; burst <= 3*Batch+1; burst++ {
		for i := range burst {
			if _, err := send.Write([]byte{byte(burst), byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		// One more datagram, sent from inside the first batch's handling:
		// it arrives after that read emptied the socket.
		want, late := burst+1, false
		got := 0
		done := make(chan error, 1)
		go func() {
			done <- io.ReadLoop(func(n int) bool {
				for i := range n {
					pkt, _ := io.Packet(i)
					if len(pkt) != 2 || int(pkt[0]) != burst {
						t.Errorf("burst %d: datagram %v", burst, pkt)
					}
				}
				got += n
				if !late {
					late = true
					if _, err := send.Write([]byte{byte(burst), 255}); err != nil {
						t.Error(err)
					}
				}
				return got == want
			})
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("burst of %d: %v", burst, err)
			}
		case <-time.After(5 * time.Second):
			conn.Close()
			<-done
			t.Fatalf("burst of %d: %d of %d datagrams read, the rest left waiting", burst, got, want)
		}
	}
}
