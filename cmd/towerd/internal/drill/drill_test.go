package drill

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/towerd/towerd/upstream/faultproxy"
)

func validOptions() Options {
	return Options{Clients: 1, Rate: 5, Duration: time.Second, Timeout: 2 * time.Second, Names: 3,
		TTL: 10 * time.Second, Threshold: 100, Log: slog.New(slog.DiscardHandler)}
}

// Check names the flag that is out of bounds.
func TestCheckNamesTheFlag(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Options)
		want   string // "" = valid
	}{
		{"valid", func(*Options) {}, ""},
		{"too long", func(o *Options) { o.Duration = time.Hour }, "-duration"},
		{"no clients", func(o *Options) { o.Clients = 0 }, "-clients"},
		{"too many names", func(o *Options) { o.Names = maxNames + 1 }, "-names at most"},
		{"flood", func(o *Options) { o.Clients, o.Rate, o.Duration = 1000, 1000, 5*time.Minute }, "queries per path"},
		{"short ttl", func(o *Options) { o.TTL = time.Millisecond }, "-ttl"},
		{"loss over 1", func(o *Options) { o.Faults.Loss = 2 }, "-loss"},
		{"negative delay", func(o *Options) { o.Faults.Delay = -time.Second }, "-delay"},
		{"threshold over 100", func(o *Options) { o.Threshold = 101 }, "-threshold"},
	}
	for _, tt := range tests {
		o := validOptions()
		tt.change(&o)
		err := o.Check()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: Check() = %v, want an error naming %q", tt.name, err, tt.want)
		}
	}
}

// A drill without faults runs end to end on loopback, through a towerd
// built by daemon.New, and every query through towerd succeeds.
func TestRunWithoutFaults(t *testing.T) {
	o := validOptions()
	o.Faults = faultproxy.Faults{}
	o.Seed = 1
	var out strings.Builder
	passed, err := Run(o, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !passed || !strings.Contains(out.String(), "PASS: success through towerd 100.000%") ||
		!strings.Contains(out.String(), "towerd drill  seed 1") {
		t.Errorf("passed %v, report:\n%s", passed, out.String())
	}
}
