#!/bin/sh
# Installs the peers and the load generator of `make bench` on Debian when
# missing: dnsmasq (the program only, dnsmasq-base), unbound, dnsperf,
# fstrm_capture (fstrm-bin).
set -eu
need=""
command -v dnsmasq >/dev/null 2>&1 || [ -x /usr/sbin/dnsmasq ] || need="$need dnsmasq-base"
command -v unbound >/dev/null 2>&1 || [ -x /usr/sbin/unbound ] || need="$need unbound"
command -v dnsperf >/dev/null 2>&1 || need="$need dnsperf"
# Scenario 11's dnstap collector (issue 38).
command -v fstrm_capture >/dev/null 2>&1 || need="$need fstrm-bin"
if [ -n "$need" ]; then
	echo "installing:$need"
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	$SUDO apt-get update -qq
	# The unbound package may start its own service where systemd runs; the
	# bench uses its own loopback addresses and port 5300 either way.
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $need >/dev/null
fi
