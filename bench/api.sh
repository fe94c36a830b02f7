#!/usr/bin/env bash
# The programmatic API's latency from a long-lived client, side by side:
# the exec round trip of /bin/true through `airlock rpc` (JSON-RPC over a
# pipe, package sandbox/client) and through the embedded Go API (package
# sandbox, no subprocess), then 1,000 write_file+read_file pairs of 4 KiB
# each way. Prints p50/p99/mean/max per operation. Goals: exec p50 <= 2 ms
# through rpc, <= 1 ms embedded.
#
#   bench/api.sh                    # as the current user
#   N=5000 FILES=5000 bench/api.sh  # more samples
#   AS_USER=65534 bench/api.sh      # as root, also measure as an unprivileged uid
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
N=${N:-1000}
FILES=${FILES:-1000}

work=$(mktemp -d /tmp/airlock-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
build_airlock "$work/airlock"
CGO_ENABLED=0 go build -o "$work/apibench" ./bench/apibench

measure() {
	local label=$1; shift
	echo "== $label (times in ms) =="
	(cd "$work" && ${@+"$@"} env HOME="$work" TMPDIR=/tmp "$work/apibench" -n "$N" -files "$FILES" -airlock "$work/airlock")
	echo
}

measure "uid-$(id -u)"
if [ -n "${AS_USER:-}" ] && [ "$(id -u)" = 0 ]; then
	measure "uid-$AS_USER" setpriv --reuid="$AS_USER" --regid="$AS_USER" --clear-groups
fi
