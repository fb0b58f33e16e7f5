package upstream

import "testing"

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
