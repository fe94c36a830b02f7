#!/usr/bin/env bash
# Approvals, side by side in one run (as root: it binds 127.0.0.5:8080):
#  1. how long a saved (global) decision takes to reach a connection waiting
#     in ANOTHER supervisor's sandbox, beside the same decision reaching the
#     connection in the sandbox where it was made;
#  2. what an allowed host pays for approvals being on: request latency
#     through the gateway (python's http.server: a connection per request)
#     with --ask beside without.
#
#   bench/approvals.sh          # N=20 decisions, 200 keep-alive requests
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
N=${N:-20}
need jq jq
need curl curl
need python3 python3

work=$(mktemp -d /tmp/airlock-bench.XXXXXX)
mkdir -p "$work/home" "$work/ws"
build_airlock "$work/airlock"
# Its own state and config dirs: saved decisions start empty.
export AIRLOCK_STATE_DIR=$work/state HOME=$work/home
al="$work/airlock"
cleanup() { "$al" kill --all >/dev/null 2>&1 || true; kill "$srv" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
python3 -m http.server 8080 --bind 127.0.0.5 --directory "$work/ws" >/dev/null 2>&1 &
srv=$!
sleep 0.5
cd "$work/ws"

hosts=()
for i in $(seq "$N"); do hosts+=(--add-host "h$i.test:127.0.0.5"); done
"$al" run -d -q --name a --ask "${hosts[@]}" >/dev/null
"$al" run -d -q --name b --ask "${hosts[@]}" >/dev/null
a_id=$("$al" ls --json | jq -r '.[] | select(.name == "a") | .id')

ms() { echo "scale=1; ($2 - $1) / 1000000" | bc; }
same=(); other=()
for i in $(seq "$N"); do
	"$al" exec a -- sh -c "curl -s -o /dev/null http://h$i.test:8080/; date +%s%N" >"$work/a.$i" &
	pa=$!
	"$al" exec b -- sh -c "curl -s -o /dev/null http://h$i.test:8080/; date +%s%N" >"$work/b.$i" &
	pb=$!
	for _ in $(seq 200); do
		[ "$("$al" approvals --json | jq "[.[] | select(.subject == \"h$i.test:8080\")] | length")" = 2 ] && break
		sleep 0.05
	done
	id=$("$al" approvals --json | jq -r --arg s "h$i.test:8080" --arg a "$a_id" '.[] | select(.subject == $s and .sandbox == $a) | .id')
	t0=$(date +%s%N)
	"$al" approve "$id" --scope global >/dev/null
	wait "$pa" "$pb"
	same+=("$(ms "$t0" "$(cat "$work/a.$i")")")
	other+=("$(ms "$t0" "$(cat "$work/b.$i")")")
done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "== a global decision reaching a waiting connection ($N decisions, ms after airlock approve started)"
echo "in the sandbox where it was made:     p50 $(median "${same[@]}")"
echo "in another supervisor's sandbox:      p50 $(median "${other[@]}")"

echo "== request latency to an allowed host (200 requests, ms)"
for ask in "" --ask; do
	"$al" kill --all >/dev/null 2>&1 || true
	"$al" rm -f k >/dev/null 2>&1 || true
	"$al" run -d -q --name k --allow-host h1.test:8080 --add-host h1.test:127.0.0.5 $ask >/dev/null
	out=$("$al" exec k -- sh -c \
		'urls=""; for i in $(seq 200); do urls="$urls -o /dev/null http://h1.test:8080/"; done
		 curl -s -w "%{time_total}\n" $urls' </dev/null)
	printf '%-10s p50 %s ms\n' "${ask:-no ask}" "$(printf '%s\n' $out | sort -n | awk '{v[NR]=$1*1000} END {print v[int((NR+1)/2)]}')"
done
