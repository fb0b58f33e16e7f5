#!/bin/sh
# Runs every fuzz target in the tree (make fuzz), each for its budget: the
# targets are found with `go test -list`, so a new one runs without being
# named here (issue 22: make fuzz ran 5 of 11). A crash is written to the
# package's testdata/fuzz and fails the run.
#
# FUZZTIME is the budget of every target (a count of executions: see the
# Makefile), FUZZTIME_TCP FuzzTCPStream's (a real connection loop per input).
set -eu
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-100000x}
FUZZTIME_TCP=${FUZZTIME_TCP:-10000x}
# "go test -list" prints a package's fuzz targets, then its "ok" line.
targets=$($GO test -list '^Fuzz' ./... | awk '
	/^Fuzz/ { names = names " " $1; next }
	/^ok/   { n = split(names, a, " "); for (i = 1; i <= n; i++) print $2, a[i]; names = "" }')
if [ -z "$targets" ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi
echo "$targets" | while read -r pkg target; do
	budget=$FUZZTIME
	[ "$target" = FuzzTCPStream ] && budget=$FUZZTIME_TCP
	echo "fuzz: $pkg $target ($budget)"
	$GO test -run='^$' -fuzz="^$target\$" -fuzztime="$budget" "$pkg"
done
