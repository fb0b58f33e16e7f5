package install

import "github.com/towerd/towerd/systemd"

// ConsulTokenDropInFile is the drop-in that loads ConsulTokenPath as the
// consul-token credential. It is a drop-in, not a line of towerd.service,
// because LoadCredential=ID:PATH fails the unit (243/CREDENTIALS) when PATH
// is missing, and most nodes have no token; ImportCredential=, which skips
// a missing credential, needs systemd 254 (Debian 12 has 252). Once an
// operator has a token, a missing file should stop towerd loudly rather
// than start it without the ACL it needs.
func ConsulTokenDropInFile() PlannedFile {
	return PlannedFile{
		Path: systemd.ConsulTokenDropIn,
		Data: []byte("# Written by `towerd install`: " + systemd.ConsulTokenPath + " (root only, mode 0600) reaches\n" +
			"# towerd as $CREDENTIALS_DIRECTORY/" + systemd.ConsulTokenCredential + ". towerd.toml: [consul]\n" +
			"# token_file = \"${CREDENTIALS_DIRECTORY}/" + systemd.ConsulTokenCredential + "\". `towerd uninstall` removes this file.\n" +
			"[Service]\nLoadCredential=" + systemd.ConsulTokenCredential + ":" + systemd.ConsulTokenPath + "\n"),
		Mode:   0o644,
		Reason: systemd.ConsulTokenDropIn + ": towerd reads the Consul token in " + systemd.ConsulTokenPath + " through LoadCredential=",
	}
}

// PlanConsulToken returns the drop-in when the node has a token file at
// ConsulTokenPath, so install adds it only where it cannot fail the unit.
func PlanConsulToken(files nodeFiles) (PlannedFile, bool) {
	if !nodeHas(files, systemd.ConsulTokenPath) {
		return PlannedFile{}, false
	}
	return ConsulTokenDropInFile(), true
}
