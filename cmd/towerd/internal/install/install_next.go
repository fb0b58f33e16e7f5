package install

// What install prints after its changes: the commands that start towerd
// (install never runs them unless --activate), how DNS fares until they
// have run, and how to undo it all.

import (
	"fmt"
	"strings"

	"github.com/towerd/towerd/systemd"
)

// nextSteps are the commands the operator runs to start towerd, in order,
// and the outage note when this run pointed resolv.conf at towerd.
func (in *installer) nextSteps(opts InstallOptions, p nodePlan, resolved bool) {
	if !p.packaged {
		// First: towerd.service cannot start before its user exists.
		in.r.Next = append(in.r.Next, sysusersNext)
	}
	in.r.Next = append(in.r.Next, "systemctl daemon-reload")
	if resolved {
		in.r.Next = append(in.r.Next, "systemctl restart systemd-resolved   # stub listener off")
	}
	if in.m.file(NMDropIn) != nil {
		in.r.Next = append(in.r.Next, "systemctl reload NetworkManager   # rc-manager=unmanaged")
	}
	in.r.Next = append(in.r.Next, p.dnsmasq.StopCommands...)
	enable := "systemctl enable --now " + systemd.SocketUnitName
	in.r.Next = append(in.r.Next, enable)
	if opts.Docker && p.docker.Next != "" {
		in.r.Next = append(in.r.Next, p.docker.Next)
	}
	if c := in.r.change(ResolvConfPath); c == nil || (c.Action != "wrote" && c.Action != "would write") {
		return // resolv.conf already named towerd: nothing new is down
	}
	is := "is"
	if in.r.DryRun {
		is = "would be"
	}
	until := "until `" + enable + "`"
	if p.dnsmasq.ServesDNS {
		// dnsmasq still answers on 127.0.0.1 until its stop command runs.
		in.r.Outage = fmt.Sprintf("lookups on this node go to dnsmasq on %s until it stops, then nothing answers them %s: run the next: lines together, "+
			"or install with --activate, which starts towerd itself and rolls everything back if it does not answer", towerdListenAddress, until)
		return
	}
	in.r.Outage = fmt.Sprintf("DNS on this node %s down from now %s: %s names %s, where nothing answers yet; run the next: lines together, "+
		"or install with --activate, which starts towerd itself and rolls everything back if it does not answer", is, until, ResolvConfPath, towerdListenAddress)
}

// undoSteps say how to take the node back to what it was: what `towerd
// uninstall` puts back (from the record install keeps), what it removes,
// and what to run around it.
func (in *installer) undoSteps(p nodePlan) []string {
	var restored []string
	removed := 0
	for _, rec := range in.m.Files {
		if rec.Backup != "" {
			restored = append(restored, rec.Path+" (from "+rec.Backup+")")
		} else {
			removed++
		}
	}
	what := fmt.Sprintf("removes the %d files install wrote", removed)
	if len(restored) > 0 {
		what = "puts back " + strings.Join(restored, ", ") + fmt.Sprintf(" and removes the %d other files install wrote", removed)
	}
	steps := []string{
		"systemctl disable --now " + systemd.SocketUnitName + " " + systemd.ServiceUnitName + "   # once enabled: uninstall refuses while it is",
		"towerd uninstall   # " + what + ", each only while it is still what install wrote; then run what it prints",
	}
	return append(steps, p.dnsmasq.UndoCommands...)
}
