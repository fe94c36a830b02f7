#!/usr/bin/env bash
# Sandbox start-up, side by side in one run: `airlock run -- /bin/true` beside
# bubblewrap doing the same (all namespaces, read-only root, fresh /proc,
# /dev, /tmp) and bare /bin/true; then `airlock exec` into a running sandbox.
# Prints mean and median per command and airlock's ratio to bwrap.
#
#   bench/startup.sh            # as the current user
#   RUNS=300 bench/startup.sh   # more runs
#   AS_USER=65534 bench/startup.sh   # as root, also measure as an unprivileged uid
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-200}
need() { command -v "$1" >/dev/null || { echo "bench: $1 is missing: apt-get install $2" >&2; exit 1; }; }
need hyperfine hyperfine
need bwrap bubblewrap
need jq jq

work=$(mktemp -d /tmp/airlock-bench.XXXXXX)
trap 'AIRLOCK_STATE_DIR=$work/state "$work/airlock" kill --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
chmod 755 "$work"
CGO_ENABLED=0 go build -o "$work/airlock" ./cmd/airlock
CGO_ENABLED=0 go build -o "$work/execlat" ./bench/execlat
mkdir -p "$work/ws" && chmod 777 "$work/ws"
cd "$work/ws"

# run_as PREFIX...: measure with an optional command prefix (setpriv for another uid)
measure() {
	local label=$1; shift
	local pre=("$@")
	local state="$work/state-$label"
	mkdir -p "$state" && chmod 777 "$state"
	local bw="bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-all --die-with-parent /bin/true"
	local al="env AIRLOCK_STATE_DIR=$state HOME=$work $work/airlock run -q -- /bin/true"
	hyperfine -N --warmup 10 --runs "$RUNS" --export-json "$work/$label.json" \
		-n "airlock run" "${pre[*]} $al" \
		-n "bwrap" "${pre[*]} $bw" \
		-n "/bin/true" "${pre[*]} /bin/true" >/dev/null
	# exec into a running sandbox
	local id
	id=$(${pre[@]+"${pre[@]}"} env AIRLOCK_STATE_DIR="$state" HOME="$work" "$work/airlock" run -d -q)
	hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$work/$label-exec.json" \
		-n "airlock exec" "${pre[*]} env AIRLOCK_STATE_DIR=$state HOME=$work $work/airlock exec $id -- /bin/true" >/dev/null
	local lat
	lat=$(${pre[@]+"${pre[@]}"} env AIRLOCK_STATE_DIR="$state" HOME="$work" "$work/execlat" -n 1000 "$id")
	${pre[@]+"${pre[@]}"} env AIRLOCK_STATE_DIR="$state" HOME="$work" "$work/airlock" kill "$id" >/dev/null

	echo "== $label ($RUNS runs each; times in ms) =="
	jq -r -s '.[].results[] | [.command, (.mean*1000), (.median*1000), (.stddev*1000)] | @tsv' \
		"$work/$label.json" "$work/$label-exec.json" |
		awk -F'\t' 'BEGIN{printf "%-14s %8s %8s %8s\n","command","mean","median","stddev"} {printf "%-14s %8.2f %8.2f %8.2f\n",$1,$2,$3,$4}'
	jq -r '.results | (map(select(.command=="airlock run"))[0].median) / (map(select(.command=="bwrap"))[0].median) | "ratio airlock run / bwrap (median): \(. * 100 | round / 100)x"' "$work/$label.json"
	echo "$lat"
	echo
}

measure "uid-$(id -u)"
if [ -n "${AS_USER:-}" ] && [ "$(id -u)" = 0 ]; then
	measure "uid-$AS_USER" setpriv --reuid="$AS_USER" --regid="$AS_USER" --clear-groups
fi
