package dnstap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Frame Streams (github.com/farsightsec/fstrm, the transport of dnstap):
// a data frame is a 32-bit big-endian length and the payload; a control
// frame is a zero length (the escape), its own length, its type and its
// fields. A bidirectional writer says READY with the content types it
// offers, the reader answers ACCEPT with the one it takes, the writer says
// START and sends data frames, and ends with STOP, answered by FINISH.
// This is the whole of what towerd writes; the handshake's three frames
// are written here rather than through golang-framestream's Writer, whose
// bufio writes frame by frame where towerd's writer sends a batch of
// frames already framed in the queue's buffer with one write.

// ContentType is dnstap's Frame Streams content type.
const ContentType = "protobuf:dnstap.Dnstap"

const (
	controlAccept = 1
	controlStart  = 2
	controlStop   = 3
	controlReady  = 4
	controlFinish = 5

	fieldContentType = 1

	// maxControlLen bounds a control frame from the reader (fstrm's own
	// limit is 512 bytes): a reader cannot make towerd allocate more.
	maxControlLen = 512
)

var errHandshake = errors.New("frame streams handshake")

// appendControl appends a control frame of type typ, with the dnstap
// content type when withType.
func appendControl(dst []byte, typ uint32, withType bool) []byte {
	n := 4
	if withType {
		n += 8 + len(ContentType)
	}
	dst = binary.BigEndian.AppendUint32(dst, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst = binary.BigEndian.AppendUint32(dst, typ)
	if withType {
		dst = binary.BigEndian.AppendUint32(dst, fieldContentType)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(ContentType)))
		dst = append(dst, ContentType...)
	}
	return dst
}

// readControl reads one control frame and returns its type and whether it
// names the dnstap content type.
func readControl(r io.Reader) (typ uint32, dnstap bool, err error) {
	var hdr [12]byte
	if _, err := io.ReadFull(r, hdr[:8]); err != nil {
		return 0, false, err
	}
	if binary.BigEndian.Uint32(hdr[:4]) != 0 {
		return 0, false, fmt.Errorf("%w: a data frame where a control frame was due", errHandshake)
	}
	n := binary.BigEndian.Uint32(hdr[4:8])
	if n < 4 || n > maxControlLen {
		return 0, false, fmt.Errorf("%w: control frame of %d bytes", errHandshake, n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, false, err
	}
	typ = binary.BigEndian.Uint32(body)
	for f := body[4:]; len(f) >= 8; {
		ft, fl := binary.BigEndian.Uint32(f), binary.BigEndian.Uint32(f[4:])
		if uint64(fl) > uint64(len(f)-8) {
			break
		}
		if ft == fieldContentType && string(f[8:8+fl]) == ContentType {
			dnstap = true
		}
		f = f[8+fl:]
	}
	return typ, dnstap, nil
}

// handshake opens a bidirectional stream on c: READY, the reader's ACCEPT
// of the dnstap content type, START; all within timeout.
func handshake(c net.Conn, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write(appendControl(nil, controlReady, true)); err != nil {
		return err
	}
	typ, ok, err := readControl(c)
	if err != nil {
		return err
	}
	if typ != controlAccept || !ok {
		return fmt.Errorf("%w: the reader did not accept %s", errHandshake, ContentType)
	}
	_, err = c.Write(appendControl(nil, controlStart, true))
	return err
}

// stop ends a stream: STOP, and the reader's FINISH awaited within timeout.
func stop(c net.Conn, timeout time.Duration) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(appendControl(nil, controlStop, false)); err == nil {
		_, _, _ = readControl(c)
	}
}
