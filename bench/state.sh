#!/usr/bin/env bash
# Cost that grows with use: how `airlock ls`, `airlock get NAME`,
# `airlock exec NAME` and `airlock run -- /bin/true` scale with the number of sandboxes in the state dir
# (1, 100 and 1,000), and what N foreground runs with network leave on disk.
#
# The entries are what a harness's runs keep: stopped sandboxes whose
# overlay changes wait for review. One is made for real (airlock run
# --workspace-mode overlay), the rest are copies of it under fresh ids; one
# more is a live detached sandbox named "live", which get and exec reach.
#
#   bench/state.sh                      # the binary built from this tree
#   bench/state.sh OLD NEW              # binaries side by side, same run
#   RUNS=50 DU_RUNS=100 bench/state.sh  # more timing runs, more runs for du
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-30}
DU_RUNS=${DU_RUNS:-50}
need hyperfine hyperfine
need jq jq

work=$(mktemp -d /tmp/airlock-bench.XXXXXX)
cleanup() {
	for s in "$work"/state-*; do
		[ -d "$s" ] && AIRLOCK_STATE_DIR=$s HOME=$work "$work/bin-0" kill --all >/dev/null 2>&1 || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
chmod 755 "$work"

bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
	build_airlock "$work/airlock"
	bins=("$work/airlock")
fi
for i in "${!bins[@]}"; do cp "${bins[$i]}" "$work/bin-$i"; done
mkdir -p "$work/ws" && echo a >"$work/ws/a.txt"
cd "$work/ws"

# fill STATE BIN N: N sandboxes in STATE, "live" among them.
fill() {
	local state=$1 bin=$2 n=$3
	local a=(env AIRLOCK_STATE_DIR="$state" HOME="$work" "$bin")
	"${a[@]}" run -d -q --name live >/dev/null
	[ "$n" -gt 1 ] || return 0
	"${a[@]}" run -q --workspace-mode overlay -- sh -c 'echo new >new.txt' 2>/dev/null
	local tmpl
	tmpl=$("${a[@]}" ls --json | jq -r '.[] | select(.name != "live") | .id')
	for _ in $(seq 3 "$n"); do
		local id
		id=$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
		cp -a "$state/sandboxes/$tmpl" "$state/sandboxes/$id"
		jq -c --arg id "$id" '.id = $id' "$state/sandboxes/$tmpl/sandbox.json" >"$state/sandboxes/$id/sandbox.json"
	done
	local got
	got=$("${a[@]}" ls --json | jq length)
	[ "$got" = "$n" ] || { echo "bench: made $got sandboxes, want $n" >&2; exit 1; }
}

# median CMD...: the median wall time of CMD in ms
median() {
	hyperfine -N --warmup 3 --runs "$RUNS" --export-json "$work/h.json" "$*" >/dev/null 2>&1
	jq '.results[0].median * 1000' "$work/h.json"
}

for i in "${!bins[@]}"; do
	bin=$work/bin-$i
	echo "== ${bins[$i]} ($RUNS runs each; median ms) =="
	printf '%-24s %9s %9s %9s %9s %9s\n' command 1 100 1000 100/1 1000/1
	declare -A t=()
	for n in 1 100 1000; do
		state=$work/state-$i-$n
		fill "$state" "$bin" "$n"
		pre="env AIRLOCK_STATE_DIR=$state HOME=$work $bin"
		t[ls,$n]=$(median "$pre ls")
		t[get,$n]=$(median "$pre get live")
		t[exec,$n]=$(median "$pre exec live -- /bin/true")
		t[run,$n]=$(median "$pre run -q -- /bin/true")
		AIRLOCK_STATE_DIR=$state HOME=$work "$bin" kill live >/dev/null
	done
	for c in ls get exec run; do
		label=$c
		case $c in get) label="get live" ;; exec) label="exec live -- /bin/true" ;; run) label="run -- /bin/true" ;; esac
		awk -v l="$label" -v a="${t[$c,1]}" -v b="${t[$c,100]}" -v c="${t[$c,1000]}" \
			'BEGIN { printf "%-24s %9.2f %9.2f %9.2f %8.2fx %8.2fx\n", l, a, b, c, b/a, c/a }'
	done
	# What DU_RUNS foreground runs with network leave behind.
	state=$work/state-$i-du
	for _ in $(seq "$DU_RUNS"); do
		AIRLOCK_STATE_DIR=$state HOME=$work "$bin" run -q --allow-host example.com -- true
	done
	echo "after $DU_RUNS runs with --allow-host: $(du -sk "$state" | cut -f1) KiB in the state dir, $(AIRLOCK_STATE_DIR=$state HOME=$work "$bin" ls --json | jq length) sandboxes listed"
	echo
	unset t
done
