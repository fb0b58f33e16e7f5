package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"strings"
)

// Docker's files, as the target system sees them, and towerd's drop-in
// that adds docker0's address to towerd.socket.
const (
	DockerDaemonJSON   = "/etc/docker/daemon.json"
	DockerSocketDropIn = "/etc/systemd/system/towerd.socket.d/docker0.conf"
)

// defaultDockerBridge is docker0's address and subnet when daemon.json sets
// no "bip".
var defaultDockerBridge = netip.MustParsePrefix("172.17.0.1/16")

// DockerPlan is what install can do so containers on Docker's default
// bridge resolve through towerd. Docker copies the host's resolv.conf into
// each container but drops loopback nameservers, which a container cannot
// reach; with none left it uses 8.8.8.8 and 8.8.4.4. So with only
// "nameserver 127.0.0.1" every container would bypass towerd, and the
// node's private zones (consul. among them) would not resolve in it.
type DockerPlan struct {
	// Present: Docker is installed (daemon.json, dockerd or its unit).
	Present bool
	// Bridge is docker0's address with its subnet: daemon.json's "bip",
	// else 172.17.0.1/16.
	Bridge netip.Prefix
	// Warning is the report line when Docker is present and install was
	// not asked to handle it.
	Warning string

	// The rest is set only when install was asked to (its flag).

	// DaemonJSON is daemon.json with "dns" set to the bridge address and
	// every other byte kept; DaemonJSONExisted tells whether there was a
	// file (uninstall then restores the backup, else removes the file).
	// DaemonJSONChanged is false when "dns" already says so.
	DaemonJSON        []byte
	DaemonJSONExisted bool
	DaemonJSONChanged bool
	// PreviousDNS is the "dns" value replaced, raw JSON, if any.
	PreviousDNS string
	// SocketDropIn adds the bridge address to towerd.socket.
	SocketDropIn PlannedFile
	// Listen and Allow go into towerd.toml: towerd must know the address
	// is its own (never forward to itself), and answer the bridge's
	// clients. Allow replaces the default, so loopback stays in the list.
	Listen string
	Allow  string
	// Reasons are the report lines; Next the step to print after install.
	Reasons []string
	Next    string
}

// PlanDocker finds Docker under the root and, when apply is set (install's
// --docker), plans the edits that send containers to towerd on docker0.
// Without apply it only explains, in Warning: install never edits Docker's
// configuration unasked, since the daemon must be restarted to take it.
func PlanDocker(files nodeFiles, apply bool) (DockerPlan, error) {
	var p DockerPlan
	for _, name := range []string{DockerDaemonJSON, "/usr/bin/dockerd", "/usr/sbin/dockerd",
		"/lib/systemd/system/docker.service", "/usr/lib/systemd/system/docker.service", "/etc/systemd/system/docker.service"} {
		if nodeHas(files, name) {
			p.Present = true
		}
	}
	if !p.Present {
		return p, nil
	}
	data, err := files.ReadFile(DockerDaemonJSON)
	switch {
	case err == nil:
		p.DaemonJSONExisted = true
	case errors.Is(err, fs.ErrNotExist):
		data = nil
	default:
		return p, fmt.Errorf("reading %s: %w", DockerDaemonJSON, err)
	}
	p.Bridge = defaultDockerBridge
	if len(bytes.TrimSpace(data)) > 0 {
		var conf struct {
			Bip string `json:"bip"`
		}
		if err := json.Unmarshal(data, &conf); err != nil {
			return p, fmt.Errorf("reading %s: %w", DockerDaemonJSON, err)
		}
		if conf.Bip != "" {
			if p.Bridge, err = netip.ParsePrefix(conf.Bip); err != nil {
				return p, fmt.Errorf("%s: \"bip\": %w", DockerDaemonJSON, err)
			}
		}
	}
	addr := p.Bridge.Addr().String()
	if !apply {
		p.Warning = "Docker is installed: containers on its default bridge cannot reach towerd on 127.0.0.1, " +
			"and Docker then gives them 8.8.8.8 and 8.8.4.4, bypassing towerd and the node's private zones. " +
			"Run install with --docker to set \"dns\": [\"" + addr + "\"] in " + DockerDaemonJSON +
			" and have towerd listen on " + addr + ":53 for " + p.Bridge.Masked().String()
		return p, nil
	}
	p.DaemonJSON, p.PreviousDNS, err = setDockerDNS(data, addr)
	if err != nil {
		return p, fmt.Errorf("editing %s: %w", DockerDaemonJSON, err)
	}
	p.DaemonJSONChanged = !bytes.Equal(p.DaemonJSON, data)
	p.Listen = addr + ":53"
	p.Allow = p.Bridge.Masked().String()
	p.SocketDropIn = PlannedFile{
		Path: DockerSocketDropIn,
		Data: []byte("# Written by `towerd install --docker`: containers on docker0 ask towerd\n" +
			"# here. FreeBind lets the socket bind before dockerd has created docker0.\n" +
			"# `towerd uninstall` removes this file.\n" +
			"[Socket]\nListenDatagram=" + p.Listen + "\nListenStream=" + p.Listen + "\nFreeBind=yes\n"),
		Mode:   0o644,
		Reason: DockerSocketDropIn + ": towerd.socket also listens on " + p.Listen + ", docker0's address",
	}
	if p.DaemonJSONChanged {
		r := DockerDaemonJSON + ": \"dns\": [\"" + addr + "\"], so containers ask towerd on docker0 instead of 8.8.8.8"
		if p.PreviousDNS != "" {
			r += " (was " + p.PreviousDNS + ")"
		}
		p.Reasons = append(p.Reasons, r)
	}
	p.Reasons = append(p.Reasons, p.SocketDropIn.Reason,
		"towerd.toml: listen adds "+p.Listen+", allow adds "+p.Allow+" (Docker's default bridge)")
	p.Next = "systemctl restart docker   # containers get towerd as their resolver when (re)started"
	return p, nil
}

// setDockerDNS sets the top-level "dns" key of daemon.json to [addr],
// leaving every other byte of the file as it was: the value is replaced in
// place, or the key inserted first with the indentation the file uses.
// It returns the previous value, raw.
func setDockerDNS(data []byte, addr string) (out []byte, previous string, err error) {
	value := `["` + addr + `"]`
	if len(bytes.TrimSpace(data)) == 0 {
		return []byte("{\n  \"dns\": " + value + "\n}\n"), "", nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, "", err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, "", errors.New("not a JSON object")
	}
	open := int(dec.InputOffset()) // just after "{"
	first := -1                    // where the first key starts
	for dec.More() {
		before := int(dec.InputOffset())
		keyTok, err := dec.Token()
		if err != nil {
			return nil, "", err
		}
		if first < 0 {
			first = before + len(data[before:]) - len(bytes.TrimLeft(data[before:], " \t\r\n,"))
		}
		key, _ := keyTok.(string)
		afterKey := int(dec.InputOffset())
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, "", err
		}
		end := int(dec.InputOffset())
		if key != "dns" {
			continue
		}
		// The value starts after the colon and any blanks.
		start := afterKey + bytes.IndexByte(data[afterKey:], ':') + 1
		for start < end && strings.ContainsRune(" \t\r\n", rune(data[start])) {
			start++
		}
		previous = string(data[start:end])
		if compactJSON(previous) == value {
			return data, previous, nil
		}
		out = append(append(append([]byte{}, data[:start]...), value...), data[end:]...)
		return out, previous, nil
	}
	if _, err := dec.Token(); err != nil { // the closing "}"
		return nil, "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, "", errors.New("trailing data after the JSON object")
	}
	if first < 0 {
		// {} : put the key inside, on its own lines.
		closeAt := open + bytes.IndexByte(data[open:], '}')
		out = append(append(append([]byte{}, data[:open]...), "\n  \"dns\": "+value+"\n"...), data[closeAt:]...)
		return out, "", nil
	}
	// Copy the blanks that precede the first key (newline and indent).
	sep := string(data[open:first])
	if sep == "" {
		sep = " "
	}
	out = append(append(append([]byte{}, data[:first]...), `"dns": `+value+","+sep...), data[first:]...)
	return out, "", nil
}

func compactJSON(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}
