package dnstap

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/test/dnstest"
)

// fields decodes one protobuf message into its fields by number: varints
// and fixed32 as uint64, bytes as []byte. It fails the test on a malformed
// message.
func fields(t *testing.T, b []byte) map[protowire.Number][]any {
	t.Helper()
	out := map[protowire.Number][]any{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		var v any
		switch typ {
		case protowire.VarintType:
			x, n2 := protowire.ConsumeVarint(b)
			v, n = x, n2
		case protowire.Fixed32Type:
			x, n2 := protowire.ConsumeFixed32(b)
			v, n = uint64(x), n2
		case protowire.BytesType:
			x, n2 := protowire.ConsumeBytes(b)
			v, n = x, n2
		default:
			t.Fatalf("field %d: unexpected wire type %d", num, typ)
		}
		if n < 0 {
			t.Fatalf("field %d: %v", num, protowire.ParseError(n))
		}
		out[num] = append(out[num], v)
		b = b[n:]
	}
	return out
}

func TestAppendDnstapFields(t *testing.T) {
	q, r := []byte("query-bytes"), bytes.Repeat([]byte("r"), 300) // a length of two varint bytes
	at := time.Unix(1700000000, 123456789)
	m := &message{typ: ClientResponse, tcp: true, queryAddr: netip.MustParseAddrPort("[::ffff:127.0.0.2]:5353"),
		queryTime: at, respTime: at.Add(time.Millisecond), query: q, response: r, extra: "source=cache zone=."}
	top := fields(t, appendDnstap(nil, "node-a", "towerd 1", m))
	if string(top[fieldIdentity][0].([]byte)) != "node-a" || string(top[fieldVersion][0].([]byte)) != "towerd 1" ||
		string(top[fieldExtra][0].([]byte)) != "source=cache zone=." || top[fieldType][0].(uint64) != dnstapTypeMessage {
		t.Fatalf("Dnstap fields: %v", top)
	}
	msg := fields(t, top[fieldMessage][0].([]byte))
	want := map[protowire.Number]any{
		msgType: uint64(ClientResponse), msgSocketFamily: uint64(familyINET), msgSocketProtocol: uint64(protoTCP),
		msgQueryPort: uint64(5353), msgQueryTimeSec: uint64(1700000000), msgQueryTimeNsec: uint64(123456789),
		msgResponseTimeSec: uint64(1700000000), msgResponseTimeNsec: uint64(124456789),
	}
	for f, v := range want {
		if len(msg[f]) != 1 || msg[f][0] != v {
			t.Errorf("field %d: %v, want %v", f, msg[f], v)
		}
	}
	if a := msg[msgQueryAddress][0].([]byte); !bytes.Equal(a, []byte{127, 0, 0, 2}) {
		t.Errorf("query address %v, want 127.0.0.2 in 4 bytes", a)
	}
	if !bytes.Equal(msg[msgQueryMessage][0].([]byte), q) || !bytes.Equal(msg[msgResponseMessage][0].([]byte), r) {
		t.Error("the DNS messages are not carried as given")
	}
	if msg[msgResponseAddress] != nil {
		t.Error("a response address towerd does not know was written")
	}
}

// reader is a Frame Streams reader of the test's own: the bidirectional
// handshake, then every data frame on frames.
type reader struct {
	ln     net.Listener
	frames chan []byte
	conns  chan net.Conn
	// stall: after the handshake, read nothing (a stopped reader).
	stall bool
}

func newReader(t *testing.T, path string, stall bool) *reader {
	t.Helper()
	return newReaderOn(t, "unix", path, stall)
}

func newReaderOn(t *testing.T, network, address string, stall bool) *reader {
	t.Helper()
	ln, err := net.Listen(network, address)
	if err != nil {
		t.Fatal(err)
	}
	r := &reader{ln: ln, frames: make(chan []byte, 100000), conns: make(chan net.Conn, 16), stall: stall}
	t.Cleanup(func() { ln.Close() })
	go r.accept(t)
	return r
}

func (r *reader) accept(t *testing.T) {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		t.Cleanup(func() { c.Close() })
		go r.serve(c)
	}
}

func (r *reader) serve(c net.Conn) {
	typ, ok, err := readControl(c)
	if err != nil || typ != controlReady || !ok {
		c.Close()
		return
	}
	if _, err := c.Write(appendControl(nil, controlAccept, true)); err != nil {
		return
	}
	if typ, _, err := readControl(c); err != nil || typ != controlStart {
		c.Close()
		return
	}
	r.conns <- c
	if r.stall {
		return
	}
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n == 0 { // a control frame: STOP
			typ, _, err := readControlBody(c)
			if err == nil && typ == controlStop {
				_, _ = c.Write(appendControl(nil, controlFinish, false))
			}
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		r.frames <- b
	}
}

// readControlBody reads a control frame whose escape was read already.
func readControlBody(c io.Reader) (uint32, bool, error) {
	return readControl(io.MultiReader(bytes.NewReader([]byte{0, 0, 0, 0}), c))
}

func (r *reader) next(t *testing.T) []byte {
	t.Helper()
	select {
	case b := <-r.frames:
		return b
	case <-time.After(5 * time.Second): // a bound on a hang
		t.Fatal("no frame")
		return nil
	}
}

func exchange(i int) *resolver.ClientExchange {
	return &resolver.ClientExchange{Client: netip.MustParseAddrPort("127.0.0.1:40000"), Query: []byte{byte(i >> 8), byte(i)},
		Response: []byte("answer"), QueryTime: time.Unix(1, 0), ResponseTime: time.Unix(2, 0), Source: "cache", Zone: "."}
}

func typeOf(t *testing.T, frame []byte) MessageType {
	t.Helper()
	return MessageType(fields(t, fields(t, frame)[fieldMessage][0].([]byte))[msgType][0].(uint64))
}

func TestWriterSendsAndFilters(t *testing.T) {
	dir := t.TempDir()
	r := newReader(t, filepath.Join(dir, "r.sock"), false)
	w, err := New(Options{Network: "unix", Address: r.ln.Addr().String(), Types: []MessageType{ClientResponse, ForwarderQuery}}, NewStats())
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	defer w.Close(time.Second)
	w.Client(*exchange(1))
	w.Forwarder(resolver.ForwarderExchange{Server: netip.MustParseAddrPort("192.0.2.53:53"), Query: []byte("q"), Response: []byte("r"), Zone: ".", Hedge: true})
	if got := typeOf(t, r.next(t)); got != ClientResponse {
		t.Errorf("first frame %d, want CLIENT_RESPONSE only (client_query not configured)", got)
	}
	f := r.next(t)
	if typeOf(t, f) != ForwarderQuery {
		t.Fatalf("second frame %d, want FORWARDER_QUERY", typeOf(t, f))
	}
	if extra := string(fields(t, f)[fieldExtra][0].([]byte)); extra != "source=hedge zone=." {
		t.Errorf("a hedge's forwarder query says %q, want source=hedge zone=.", extra)
	}
	m := fields(t, fields(t, f)[fieldMessage][0].([]byte))
	if a := m[msgResponseAddress][0].([]byte); !bytes.Equal(a, []byte{192, 0, 2, 53}) || m[msgResponsePort][0].(uint64) != 53 {
		t.Errorf("forwarder query's server %v:%v, want 192.0.2.53:53", a, m[msgResponsePort])
	}
}

// Over TCP (dnstap.tcp) the stream is the same: handshake, then frames.
func TestWriterOverTCP(t *testing.T) {
	r := newReaderOn(t, "tcp", "127.0.0.1:0", false)
	w, err := New(Options{Network: "tcp", Address: r.ln.Addr().String(), Identity: "node-b"}, NewStats())
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	defer w.Close(time.Second)
	w.Client(*exchange(7))
	f := r.next(t)
	if got := typeOf(t, f); got != ClientQuery {
		t.Fatalf("first frame over TCP %d, want CLIENT_QUERY", got)
	}
	if id := string(fields(t, f)[fieldIdentity][0].([]byte)); id != "node-b" {
		t.Errorf("identity %q over TCP, want node-b", id)
	}
	if got := typeOf(t, r.next(t)); got != ClientResponse {
		t.Errorf("second frame over TCP %d, want CLIENT_RESPONSE", got)
	}
}

// A reader that takes nothing (issue 38's stopped reader): enqueueing never
// waits, the buffer stays within MaxBuffered, and what does not fit is
// counted as dropped.
func TestWriterStalledReaderDropsNeverWaits(t *testing.T) {
	dir := t.TempDir()
	r := newReader(t, filepath.Join(dir, "r.sock"), true)
	stats := NewStats()
	var logged dnstest.SyncBuffer
	w, err := New(Options{Network: "unix", Address: r.ln.Addr().String(), Log: slog.New(slog.NewTextHandler(&logged, nil))}, stats)
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	defer w.Close(0)
	<-r.conns
	const n = 100000 // 200,000 messages: well past what the socket and the buffer hold
	for i := range n {
		w.Client(*exchange(i))
		if i%1000 == 0 {
			w.mu.Lock()
			if len(w.pending) > MaxBuffered {
				t.Fatalf("%d bytes pending, above MaxBuffered", len(w.pending))
			}
			w.mu.Unlock()
		}
	}
	if stats.Dropped() == 0 {
		t.Fatal("nothing dropped with a reader that reads nothing")
	}
	defer func() {
		if t.Failed() {
			t.Logf("log:\n%s", logged.String())
		}
	}()
	// The writer's log: no event to wait on.
	dnstest.Eventually(t, func() bool { return strings.Contains(logged.String(), "dnstap: messages dropped") },
		5*time.Second, "the writer's drop report")
}

// The writer connects again when the reader comes back: after the first
// reader is gone, a new reader on the same path gets the messages written
// after (the writer tries every ReconnectInterval, on the real clock).
func TestWriterReconnects(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.sock")
	r := newReader(t, path, false)
	w, err := New(Options{Network: "unix", Address: path}, NewStats())
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	defer w.Close(time.Second)
	w.Client(*exchange(1))
	r.next(t)
	r.next(t)
	c := <-r.conns
	r.ln.Close()
	c.Close()
	r2 := newReader(t, path, false)
	for i := 2; ; i++ {
		w.Client(*exchange(i)) // the first writes after the close fail, and are dropped
		select {
		case f := <-r2.frames:
			if q := fields(t, fields(t, f)[fieldMessage][0].([]byte))[msgQueryMessage][0].([]byte); q[1] < 2 {
				t.Fatalf("the new reader got message %d, written before it came", q[1])
			}
			return
		case <-time.After(100 * time.Millisecond): // a message every 0.1 s until the writer is back
		}
		if i > 100 {
			t.Fatal("the writer did not connect to the new reader within 10 s")
		}
	}
}

// BenchmarkClientTap is the cost on the answering goroutine of one answer
// with dnstap on: two messages encoded into the buffer.
func BenchmarkClientTap(b *testing.B) {
	w, err := New(Options{Network: "unix", Address: "/nonexistent"}, NewStats())
	if err != nil {
		b.Fatal(err)
	}
	e := exchange(1)
	e.Query = make([]byte, 40)
	e.Response = make([]byte, 60)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w.Client(*e)
		if i%1000 == 0 {
			w.take(w.pending[:0]) // no writer: the benchmark empties the buffer
		}
	}
}

// A collector's control frame is read within maxControlLen, and only an
// ACCEPT naming the dnstap content type opens a stream.
func TestReadControlBounds(t *testing.T) {
	big := binary.BigEndian.AppendUint32(nil, 0)
	big = binary.BigEndian.AppendUint32(big, maxControlLen+1)
	if _, _, err := readControl(bytes.NewReader(big)); err == nil {
		t.Error("a control frame over maxControlLen was read")
	}
	data := binary.BigEndian.AppendUint32(nil, 12) // a data frame where ACCEPT is due
	if _, _, err := readControl(bytes.NewReader(data)); err == nil {
		t.Error("a data frame was taken for a control frame")
	}
	// A field length past the frame's end is not followed.
	bad := binary.BigEndian.AppendUint32(nil, 0)
	bad = binary.BigEndian.AppendUint32(bad, 12)
	bad = binary.BigEndian.AppendUint32(bad, controlAccept)
	bad = binary.BigEndian.AppendUint32(bad, fieldContentType)
	bad = binary.BigEndian.AppendUint32(bad, 1<<31)
	if typ, ok, err := readControl(bytes.NewReader(bad)); err != nil || typ != controlAccept || ok {
		t.Errorf("ACCEPT with a field past its end: type %d, dnstap %v, err %v; want ACCEPT without the content type", typ, ok, err)
	}
	other := appendControl(nil, controlAccept, false)
	if _, ok, _ := readControl(bytes.NewReader(other)); ok {
		t.Error("an ACCEPT without the content type was taken as dnstap's")
	}
	if typ, ok, err := readControl(bytes.NewReader(appendControl(nil, controlAccept, true))); err != nil || typ != controlAccept || !ok {
		t.Errorf("ACCEPT of dnstap: type %d, dnstap %v, err %v", typ, ok, err)
	}
}
