#!/usr/bin/env bash
# N bind-mode sandboxes started together on one large tree: each takes the
# tree's manifest in the background. Prints, per binary, the wall time and
# the CPU time (user + sys, every process of the batch) of N concurrent
# `airlock run -- sleep S` on a tree nobody hashed before (no hash cache),
# beside one such run alone.
#
#   bench/scans.sh                  # the binary built from this tree
#   bench/scans.sh OLD NEW          # binaries side by side, same run
#   N=4 FILES=20000 SIZE=8192 bench/scans.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
N=${N:-4}
FILES=${FILES:-20000}
SIZE=${SIZE:-8192}
SLEEP=${SLEEP:-4}
ROUNDS=${ROUNDS:-2}

work=$(mktemp -d /tmp/airlock-scanbench.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
CGO_ENABLED=0 go build -o "$work/wsbench" ./bench/wsbench
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
	build_airlock "$work/airlock"
	bins=("$work/airlock")
fi
mkdir -p "$work/big" "$work/home"
echo "making $FILES files of $SIZE bytes..." >&2
"$work/wsbench" mktree "$work/big" "$FILES" "$SIZE"
sleep 1 # let ctimes settle, so the hash cache may keep them

# batch BIN K: K runs at once on a fresh state dir (no hash cache); prints
# "wall cpu" in seconds.
batch() {
	local bin=$1 k=$2 state
	state=$(mktemp -d "$work/state.XXXXXX")
	/usr/bin/time -f '%e %U %S' -o "$work/t" bash -c '
		for _ in $(seq '"$k"'); do
			AIRLOCK_STATE_DIR='"$state"' HOME='"$work/home"' '"$bin"' run -q -w '"$work/big"' -- sleep '"$SLEEP"' &
		done
		wait'
	rm -rf "$state"
	awk '{ printf "%.2f %.2f\n", $1, $2 + $3 }' "$work/t"
}

for bin in "${bins[@]}"; do
	echo "== $bin: $FILES files x $SIZE bytes, runs of sleep $SLEEP, best of $ROUNDS (seconds) =="
	for k in 1 "$N"; do
		best=""
		for _ in $(seq "$ROUNDS"); do
			r=$(batch "$bin" "$k")
			if [ -z "$best" ] || awk -v a="$r" -v b="$best" 'BEGIN { split(a, x, " "); split(b, y, " "); exit !(x[2] < y[2]) }'; then
				best=$r
			fi
		done
		echo "$k at once: wall ${best% *}, cpu ${best#* }"
	done
	echo
done
