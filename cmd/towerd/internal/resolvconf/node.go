package resolvconf

// What `towerd install` leaves in a node's resolv.conf plumbing, and where
// the node's DHCP clients keep the servers they learn. Install
// (cmd/towerd/internal/install) writes and detects these; the config (zone
// "." with resolv_conf unset) falls back on them when /etc/resolv.conf is
// towerd's own. One list, so the two cannot drift apart.
const (
	// ManagedMarker starts the first line of every resolv.conf towerd
	// install writes: the file is towerd's and names only towerd.
	ManagedMarker = "# Managed by towerd"
	// BackupPath is where install keeps the resolv.conf it replaced.
	BackupPath = "/etc/resolv.pre-towerd-backup.conf"
	// NetworkManagerPath is NetworkManager's list of the servers it
	// learned, written whatever its rc-manager.
	NetworkManagerPath = "/run/NetworkManager/no-stub-resolv.conf"
	// DhclientDir holds DhclientPath, which install's dhclient enter hook
	// writes instead of /etc/resolv.conf.
	DhclientDir  = "/run/towerd-dhclient"
	DhclientPath = DhclientDir + "/resolv.conf"
	// ResolvconfPath is the resolvconf package's merged list.
	ResolvconfPath = "/run/resolvconf/resolv.conf"
)

// InstallFollowed are the files install makes zone "." follow on a node
// without systemd-resolved, in the order its detection tries their managers
// (NetworkManager, dhclient's hook, resolvconf), then its backup of the
// resolv.conf it replaced (a static node's servers, or a link to one of
// these).
var InstallFollowed = []string{NetworkManagerPath, DhclientPath, ResolvconfPath, BackupPath}
