#!/usr/bin/env bash
# What every airlock start pays before its main, by module: the package
# initialisers that GODEBUG=inittrace=1 reports for `airlock version`
# (medians of RUNS runs, summed by module), beside the whole start of
# `airlock version` and of a Go hello world, run in turn (bench/alternate).
# A module's initialisers run in every process of this binary, whether or
# not the command uses it (a native run initialises the Docker client too):
# this says what leaving one out of the binary a run starts would save.
# Rows by module, then the costliest packages: the standard library's row
# holds what modules pull in (encoding/gob for the MCP SDK, net/http). The
# sums leave out the runtime's own start and the page faults a larger
# binary takes, and tracing adds a little to each: compare the rows with
# each other, and the sum with the whole start's difference.
#
#   bench/inits.sh            # 100 runs
#   RUNS=300 bench/inits.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-100}

work=$(mktemp -d /tmp/airlock-inits.XXXXXX)
trap 'rm -rf "$work"' EXIT
build_airlock "$work/airlock"
CGO_ENABLED=0 go build -o "$work/alternate" ./bench/alternate
build_hello_go "$work"

echo "== the whole start, $RUNS runs each (ms: mean median p10 p90, ratio to the first)"
"$work/alternate" -n "$RUNS" -warmup 10 "hello world=$work/hello-go" "airlock version=$work/airlock version" |
	awk -F'\t' '{printf "%-16s %s %s %s %s  %s\n", $1, $2, $3, $4, $5, $6}'

# Lines read: "init PACKAGE @T ms, C ms clock, B bytes, A allocs".
for _ in $(seq "$RUNS"); do
	GODEBUG=inittrace=1 "$work/airlock" version 2>&1 >/dev/null | grep '^init '
	echo "--"
done | awk -v runs="$RUNS" '
	# module: the standard library, or a path cut to its repository
	function module(p, n, a) {
		n = split(p, a, "/")
		if (a[1] !~ /\./) return "std"
		if (a[1] == "github.com" || a[1] == "golang.org" || a[1] == "kernel.org") return a[1] "/" a[2] "/" a[3]
		return a[1] "/" a[2]
	}
	# Each run adds every key, so a key missing from a run counts 0 there.
	$1 == "--" { for (k in seen) t[k, ++n[k]] = run[k] + 0; delete run; next }
	$1 == "init" { m = "module " module($2); p = "package " $2; run[m] += $5; run[p] += $5; seen[m] = seen[p] = 1 }
	END {
		for (key in seen) {
			k = n[key]
			for (i = 1; i <= k; i++) v[i] = t[key, i]
			for (i = 2; i <= k; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
			med[key] = (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
			if (key ~ /^module /) total += med[key]
		}
		printf "== package initialisers of airlock version (median ms of %d runs)\n", runs
		printf "%7.3f  all (sum of the modules)\n", total
		cmd = "sort -k2,2 -k1,1rn | awk \"{c[\\$2]++} c[\\$2] <= 12\""
		for (key in med) { split(key, w, " "); printf "%7.3f  %s %s\n", med[key], w[1], w[2] | cmd }
		close(cmd)
	}'
