package systemd

// The Consul ACL token reaches the DynamicUser= service through systemd's
// credentials: PID 1 reads the root-only file and hands the service a copy
// under $CREDENTIALS_DIRECTORY (/run/credentials/towerd.service/), readable
// by that service alone.
const (
	ConsulTokenPath       = "/etc/towerd/consul-token"
	ConsulTokenCredential = "consul-token"
	ConsulTokenDropIn     = "/etc/systemd/system/towerd.service.d/consul-token.conf"
)

// ConsulTokenDropInFile is the drop-in that loads ConsulTokenPath as the
// consul-token credential. It is a drop-in, not a line of towerd.service,
// because LoadCredential=ID:PATH fails the unit (243/CREDENTIALS) when PATH
// is missing, and most nodes have no token; ImportCredential=, which skips
// a missing credential, needs systemd 254 (Debian 12 has 252). Once an
// operator has a token, a missing file should stop towerd loudly rather
// than start it without the ACL it needs.
func ConsulTokenDropInFile() PlannedFile {
	return PlannedFile{
		Path: ConsulTokenDropIn,
		Data: []byte("# Written by `towerd install`: " + ConsulTokenPath + " (root only, mode 0600) reaches\n" +
			"# towerd as $CREDENTIALS_DIRECTORY/" + ConsulTokenCredential + ". towerd.toml: [consul]\n" +
			"# token_file = \"${CREDENTIALS_DIRECTORY}/" + ConsulTokenCredential + "\". `towerd uninstall` removes this file.\n" +
			"[Service]\nLoadCredential=" + ConsulTokenCredential + ":" + ConsulTokenPath + "\n"),
		Mode:   0o644,
		Reason: ConsulTokenDropIn + ": towerd reads the Consul token in " + ConsulTokenPath + " through LoadCredential=",
	}
}

// PlanConsulToken returns the drop-in when the node has a token file at
// ConsulTokenPath, so install adds it only where it cannot fail the unit.
func PlanConsulToken(files nodeFiles) (PlannedFile, bool) {
	if !nodeHas(files, ConsulTokenPath) {
		return PlannedFile{}, false
	}
	return ConsulTokenDropInFile(), true
}
