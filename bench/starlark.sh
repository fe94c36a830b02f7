#!/usr/bin/env bash
# What a policy script adds to each request: N small requests on one
# keep-alive connection through the gateway (proxy door, TLS intercepted),
# with no script and with the ten-line script below, in alternating rounds
# of the same run so the machine's drift moves both sides alike. Prints the
# p50 and p99 of each side, the p50 difference (the added latency per
# request) and the ratio; then the script's own cost per request in
# process (go test -bench BenchmarkOnRequest). Bar: <= 50 us added at p50.
# Needs root (port 443) and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
[ "$(id -u)" = 0 ] || { echo "bench: needs root to bind the test server on port 443" >&2; exit 1; }
command -v curl >/dev/null || { echo "bench: curl is missing: apt-get install curl" >&2; exit 1; }
N=${N:-500}
ROUNDS=${ROUNDS:-4}
ADDR=${ADDR:-127.0.0.6}

work=$(mktemp -d /tmp/airlock-slbench.XXXXXX)
chmod 755 "$work"
export AIRLOCK_STATE_DIR=$work/state
trap 'kill $up 2>/dev/null || true; rm -rf "$work"' EXIT
build_airlock "$work/airlock"
go build -o "$work/upstream" ./demo/upstream
"$work/upstream" -quiet -addr $ADDR:443 -name api.bench.test -ca-out "$work/ca.pem" &
up=$!
sleep 0.3
cat >"$work/policy.star" <<'STAR'
def is_host_allowed(host, port):
    if host.endswith(".internal.corp"):
        return False
    return None

def on_request(req):
    if req.method not in ("GET", "HEAD") or "cookie" in req.headers:
        return {"deny": "read-only, no cookies"}
    return {"set_headers": {"x-policy": "bench"}, "del_headers": ["x-debug"]}

def on_response(resp):
    return resp.status < 500
STAR
mkdir -p "$work/ws"
cd "$work/ws"
net=(--network-mode proxy --allow-host api.bench.test --add-host api.bench.test:$ADDR --upstream-ca "$work/ca.pem")
urls=$(for i in $(seq "$N"); do printf -- '-o /dev/null https://api.bench.test/small/%d ' "$i"; done)
round() { "$work/airlock" run -q "${net[@]}" "$@" -- sh -c "curl -sS -w '%{time_total}\n' $urls" | tail -n +2; }
: >"$work/without"
: >"$work/with"
for r in $(seq "$ROUNDS"); do
	round >>"$work/without"
	round --policy-script "$work/policy.star" >>"$work/with"
done
p() { sort -n "$1" | awk -v q="$2" '{a[NR]=$1} END{printf "%.1f", a[int(NR*q)]*1e6}'; }
w50=$(p "$work/without" 0.5) s50=$(p "$work/with" 0.5)
echo "== $((N * ROUNDS)) requests each side, one keep-alive connection per round (microseconds per request)"
printf 'without a script  p50 %8s  p99 %8s\n' "$w50" "$(p "$work/without" 0.99)"
printf 'with the script   p50 %8s  p99 %8s\n' "$s50" "$(p "$work/with" 0.99)"
awk -v w="$w50" -v s="$s50" 'BEGIN{printf "added at p50: %.1f us   ratio: %.3f   (bar: <= 50 us)\n", s-w, s/w}'
cd - >/dev/null
echo "== the script's hooks alone, in process (each with its snapshot; on_request with its edits)"
go test -run '^$' -bench 'BenchmarkOn(Request|Response)' -benchtime 20000x ./internal/policy/script | grep Benchmark
