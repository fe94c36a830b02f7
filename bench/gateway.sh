#!/usr/bin/env bash
# The gateway, side by side in one run, on loopback: a local HTTPS server
# (demo/upstream on 127.0.0.4:443, its own CA) reached directly by curl on the
# host, and by the same curl inside an airlock sandbox through the gateway's
# two doors: transparent (TAP -> the gateway's gVisor netstack) and proxy (the
# guest hands the connection's socket to the front door); TLS intercepted and
# re-originated either way; and through a blind tunnel (--tunnel-host: the
# SNI checked, bytes copied, curl trusting the server's own CA). Measures:
#   1. a large download (SIZE_MB, default 1024): MB/s each way and the ratio,
#      intercepted and tunnelled
#   2. 1,000 small requests on one keep-alive connection: p50/p99 per request
#   3. 200 concurrent requests, each on its own connection: how many succeed
#   4. host-side memory of an idle sandbox with its gateway (supervisor RSS)
# Needs root (port 443), curl and jq.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
[ "$(id -u)" = 0 ] || { echo "bench: needs root to bind the test server on port 443" >&2; exit 1; }
for c in curl jq; do command -v $c >/dev/null || { echo "bench: $c is missing: apt-get install $c" >&2; exit 1; }; done
SIZE_MB=${SIZE_MB:-1024}
N=${N:-1000}
ADDR=127.0.0.4

work=$(mktemp -d /tmp/airlock-gwbench.XXXXXX)
chmod 755 "$work"
export AIRLOCK_STATE_DIR=$work/state
trap '"$work/airlock" kill --all >/dev/null 2>&1 || true; kill $up 2>/dev/null || true; rm -rf "$work"' EXIT
build_airlock "$work/airlock"
go build -o "$work/upstream" ./demo/upstream
"$work/upstream" -quiet -addr $ADDR:443 -name api.bench.test -ca-out "$work/ca.pem" &
up=$!
sleep 0.3
mkdir -p "$work/ws"
cd "$work/ws"
net=(--allow-host api.bench.test --add-host api.bench.test:$ADDR --upstream-ca "$work/ca.pem")
url=https://api.bench.test
direct=(curl -sS --cacert "$work/ca.pem" --resolve api.bench.test:443:$ADDR)
# RUN_FLAGS: more `airlock run` flags, e.g. "--backend docker" (bench/docker.sh);
# MODES: the network modes to measure (a docker sandbox has the proxy only)
read -r -a run_flags <<<"${RUN_FLAGS:-}"
read -r -a modes <<<"${MODES:-transparent proxy}"
inside() { local mode=$1; shift; "$work/airlock" run -q ${run_flags[@]+"${run_flags[@]}"} --network-mode "$mode" "${net[@]}" -- "$@"; }
# the tunnelled case: no --allow-host (the host is not intercepted), and curl
# trusts the server's CA itself (copied into the workspace: /tmp is private)
cp "$work/ca.pem" "$work/ws/upstream.pem"
tunnelled() { local mode=$1; shift; "$work/airlock" run -q ${run_flags[@]+"${run_flags[@]}"} --network-mode "$mode" --tunnel-host api.bench.test --add-host api.bench.test:$ADDR -- "$@"; }

echo "== 1. download of $SIZE_MB MiB (each row paired with a direct download just before it)"
bytes=$((SIZE_MB << 20))
# row LABEL COMMAND...: the ratio is taken pair by pair, so the machine's
# speed drifting during the run (other load) moves both sides alike
row() {
	local label=$1 d g
	shift
	d=$("${direct[@]}" -o /dev/null -w '%{speed_download}' "$url/bytes/$bytes")
	g=$("$@")
	awk -v d="$d" -v g="$g" -v l="$label" 'BEGIN{printf "%-20s %6.0f MB/s  direct %6.0f MB/s  ratio to direct: %.2f\n", l, g/1e6, d/1e6, g/d}'
}
for m in "${modes[@]}"; do
	row "gateway $m" inside "$m" curl -sS -o /dev/null -w '%{speed_download}' "$url/bytes/$bytes"
done
for m in "${modes[@]}"; do
	row "tunnel  $m" tunnelled "$m" curl -sS --cacert upstream.pem -o /dev/null -w '%{speed_download}' "$url/bytes/$bytes"
done

[ -z "${DOWNLOAD_ONLY:-}" ] || exit 0 # DOWNLOAD_ONLY=1: section 1 alone

echo "== 2. $N small requests on one keep-alive connection (ms per request)"
urls=$(for i in $(seq "$N"); do printf -- '-o /dev/null %s/small/%d ' "$url" "$i"; done)
pct() { sort -n | awk '{a[NR]=$1} END{printf "p50 %.3f  p99 %.3f\n", a[int(NR*0.5)]*1000, a[int(NR*0.99)]*1000}'; }
# per transfer; all but the first reuse the connection (p50 and p99 ignore its set-up)
printf 'direct               '; "${direct[@]}" -w '%{time_total}\n' $urls | pct
for m in "${modes[@]}"; do
	printf 'gateway %-12s ' "$m"; inside "$m" sh -c "curl -sS -w '%{time_total}\n' $urls" | pct
done

echo "== 3. 200 concurrent requests through the gateway, on 200 connections"
# HTTP/1.1 so curl cannot multiplex them all over one HTTP/2 connection;
# --parallel-immediate opens every connection at once instead of waiting to
# reuse one. num_connects counts what was really opened.
par=$(for i in $(seq 200); do printf -- '-o /dev/null %s/c/%d ' "$url" "$i"; done)
for m in "${modes[@]}"; do
	inside "$m" sh -c "curl -sS --http1.1 --parallel --parallel-immediate --parallel-max 200 -w '%{http_code} %{num_connects}\n' $par 2>/dev/null" |
		awk -v m="$m" '$1 == 200 {ok++} {conns += $2} END {printf "%s: %d of 200 succeeded, over %d connections\n", m, ok, conns}' || true
done

echo "== 4. host-side memory of an idle sandbox with its gateway (${modes[0]})"
id=$("$work/airlock" run -d -q ${run_flags[@]+"${run_flags[@]}"} --network-mode "${modes[0]}" "${net[@]}")
sleep 0.5
sup=$("$work/airlock" get "$id" | jq -r .pid)
guest=$(pgrep -P "$sup" | head -1 || true)
rss() { awk '/VmRSS/{print $2/1024}' "/proc/$1/status"; }
if [ -n "$guest" ]; then
	printf 'supervisor + gateway: %.1f MiB RSS; sandbox PID 1 (guest): %.1f MiB RSS\n' "$(rss "$sup")" "$(rss "$guest")"
else # a container's guest is the engine's child, not the supervisor's
	printf 'supervisor + gateway: %.1f MiB RSS\n' "$(rss "$sup")"
fi
"$work/airlock" kill "$id" >/dev/null
