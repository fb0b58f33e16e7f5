package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/miekg/dns"
)

func TestErrorKind(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("reading from x over udp: %w", ErrTimeout), KindTimeout},
		{context.DeadlineExceeded, KindTimeout},
		{fmt.Errorf("dialing x over tcp: %w: %w", ErrNetwork, io.EOF), KindNetwork},
		{&RcodeError{Server: "x", Rcode: dns.RcodeServerFailure}, KindServFail},
		{fmt.Errorf("group g: %w", &RcodeError{Server: "x", Rcode: dns.RcodeRefused}), KindRefused},
		{&RcodeError{Server: "x", Rcode: dns.RcodeFormatError}, KindOther},
		{context.Canceled, KindOther},
		{errors.New("something else"), KindOther},
	}
	for _, tt := range tests {
		if got := ErrorKind(tt.err); got != tt.want {
			t.Errorf("ErrorKind(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestRcodeErrorMessage(t *testing.T) {
	for _, tt := range []struct {
		err  *RcodeError
		want string
	}{
		{&RcodeError{Server: "192.0.2.1:53", Rcode: dns.RcodeServerFailure}, "upstream 192.0.2.1:53 answered SERVFAIL"},
		{&RcodeError{Server: "192.0.2.1:53", Rcode: 3841}, "upstream 192.0.2.1:53 answered 3841"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}
