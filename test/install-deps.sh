#!/bin/sh
# Installs the programs towerd's tests run for real, on Debian, when missing.
# Go modules come through `go mod download`.
set -eu

need=""
command -v dig >/dev/null 2>&1 || need="$need bind9-dnsutils"

if [ -n "$need" ]; then
	echo "installing:$need"
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null
fi
go mod download
