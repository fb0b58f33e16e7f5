package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/miekg/dns"
)

func TestNormalizeAddress(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: "1.2.3.4", want: "1.2.3.4:53"},
		{in: "1.2.3.4:53", want: "1.2.3.4:53"},
		{in: "127.0.0.1:8600", want: "127.0.0.1:8600"},
		{in: " 192.0.2.1 ", want: "192.0.2.1:53"},
		{in: "::1", want: "[::1]:53"},
		{in: "[::1]", want: "[::1]:53"},
		{in: "[::1]:5353", want: "[::1]:5353"},
		{in: "2001:DB8::0001", want: "[2001:db8::1]:53"},
		{in: "fe80::1%eth0", want: "[fe80::1%eth0]:53"},
		{in: "[fe80::1%eth0]:53", want: "[fe80::1%eth0]:53"},
		{in: "", wantErr: true},
		{in: "dns.example.com", wantErr: true},
		{in: "dns.example.com:53", wantErr: true},
		{in: "1.2.3.4:", wantErr: true},
		{in: "1.2.3.4:0", wantErr: true},
		{in: "1.2.3.4:65536", wantErr: true},
		{in: "1.2.3.4:dns", wantErr: true},
		{in: "1.2.3.4.5", wantErr: true},
		{in: "[1.2.3.4.5]", wantErr: true},
		{in: "::1:53:", wantErr: true},
	}
	for _, tt := range tests {
		got, err := NormalizeAddress(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("NormalizeAddress(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

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
		{&RcodeError{Server: "192.0.2.1:53", Rcode: 3841}, "upstream 192.0.2.1:53 answered RCODE3841"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}
