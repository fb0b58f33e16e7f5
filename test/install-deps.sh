#!/bin/sh
# Installs the programs towerd's tests run for real, on Debian, when missing.
# Go modules come through `go mod download`.
set -eu

need=""
command -v dig >/dev/null 2>&1 || need="$need bind9-dnsutils"
# promtool checks and unit-tests the alert rules in monitoring/. Debian ships
# it only inside the server package (on a systemd machine that also starts a
# Prometheus on :9090: `systemctl disable --now prometheus` if unwanted);
# towerd doctor's tests run that server on a loopback port of their own.
command -v promtool >/dev/null 2>&1 || need="$need prometheus"
# The systemd tests run the real systemd-socket-activate and systemd-analyze
# (packages systemd and install; nothing is started by systemd itself), and compare
# import-dnsmasq's routing with a real dnsmasq (dnsmasq-base: the program
# without a service that would start).
command -v systemd-socket-activate >/dev/null 2>&1 || need="$need systemd"
command -v systemd-analyze >/dev/null 2>&1 || need="$need systemd"
command -v dnsmasq >/dev/null 2>&1 || [ -x /usr/sbin/dnsmasq ] || need="$need dnsmasq-base"
# The getent test runs glibc's getent through towerd in a private mount and
# network namespace: unshare, nsenter and mount (util-linux, mount), ip
# (iproute2), getent (libc-bin). It skips itself when not run as root. So
# does the day test (TestSiteDay), which builds a LAN of namespaces with ip
# netns, a bridge and veth pairs (iproute2 again).
command -v unshare >/dev/null 2>&1 || need="$need util-linux"
# The booted-systemd test (TestBootedSystemd) boots a Debian tree, made once
# by debootstrap into /var/cache/towerd-test, with systemd-nspawn
# (systemd-container). Never with its recommends: libnss-mymachines edits
# this machine's nsswitch.conf (every package here comes without them).
command -v systemd-nspawn >/dev/null 2>&1 || need="$need systemd-container"
command -v debootstrap >/dev/null 2>&1 || need="$need debootstrap"
command -v ip >/dev/null 2>&1 || need="$need iproute2"
# The drill's contention test runs it beside stress-ng's CPU hogs, both
# pinned with taskset (util-linux) to one CPU.
command -v stress-ng >/dev/null 2>&1 || need="$need stress-ng"
# make deb packs with dpkg-deb (dpkg) and make deb-check runs lintian on the
# package; the package test checks the zsh completion with zsh -n and the
# man pages with man (man-db).
# The DNS over TLS test runs a real unbound (its binary, with a config of
# its own on a free loopback port, -d) as the TLS server, and reads its
# counters with unbound-control (same package).
command -v unbound >/dev/null 2>&1 || [ -x /usr/sbin/unbound ] || need="$need unbound"
command -v dpkg-deb >/dev/null 2>&1 || need="$need dpkg"
command -v lintian >/dev/null 2>&1 || need="$need lintian"
command -v zsh >/dev/null 2>&1 || need="$need zsh"
command -v man >/dev/null 2>&1 || need="$need man-db"
# The DNSSEC test signs zones with ldns-signzone and ldns-keygen
# (ldnsutils), serves them with unbound's auth-zone and compares towerd's
# verdicts with unbound's own validator, each on a port of the test's own.
command -v ldns-signzone >/dev/null 2>&1 || need="$need ldnsutils"
command -v unbound >/dev/null 2>&1 || [ -x /usr/sbin/unbound ] || need="$need unbound"
# The dnstap tests (issue 38) read towerd's messages with the reference
# tools, fstrm_capture (fstrm-bin) and dnstap-ldns, and compare them with
# unbound's, whose binary they run in the foreground with a config of their
# own (the package may start its own service where systemd runs; the tests
# use free loopback ports either way).
command -v fstrm_capture >/dev/null 2>&1 || need="$need fstrm-bin"
command -v dnstap-ldns >/dev/null 2>&1 || need="$need dnstap-ldns"
command -v unbound >/dev/null 2>&1 || [ -x /usr/sbin/unbound ] || need="$need unbound"

if [ -n "$need" ]; then
	echo "installing:$need"
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $need >/dev/null
fi
go mod download
