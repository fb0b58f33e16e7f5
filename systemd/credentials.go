package systemd

// The Consul ACL token reaches the unprivileged service (user towerd) through systemd's
// credentials: PID 1 reads the root-only file and hands the service a copy
// under $CREDENTIALS_DIRECTORY (/run/credentials/towerd.service/), readable
// by that service alone. `towerd install` writes the drop-in that loads it.
const (
	ConsulTokenPath       = "/etc/towerd/consul-token"
	ConsulTokenCredential = "consul-token"
	ConsulTokenDropIn     = "/etc/systemd/system/towerd.service.d/consul-token.conf"
)
