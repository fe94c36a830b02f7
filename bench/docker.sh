#!/usr/bin/env bash
# The docker backend, side by side in one run:
#   1. start-up: `airlock run --backend docker -- /bin/true` beside
#      `docker run --rm --network none IMAGE /bin/true` (goal: <= 1.2x)
#   2. `airlock exec` into a running docker sandbox
#   3. the gateway benchmark (bench/gateway.sh) with --backend docker: every
#      request goes through the explicit front door (the guest accepts on
#      127.0.0.1:3128 and hands the socket to the gateway); its
#      200 concurrent requests are 200 HTTP/1.1 connections, not one HTTP/2
# Needs root (port 443 for 3), a running dockerd, hyperfine, jq, curl, and
# the image (default airlock/minimal:latest: sudo airlock images build).
#
#   bench/docker.sh                  # all three
#   RUNS=50 SIZE_MB=256 bench/docker.sh
#   IMAGE=airlock/standard bench/docker.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-30}
IMAGE=${IMAGE:-airlock/minimal:latest}
need hyperfine hyperfine
need jq jq
need docker docker.io
docker image inspect "$IMAGE" >/dev/null 2>&1 || { echo "bench: no image $IMAGE: build it with sudo airlock images build" >&2; exit 1; }

work=$(mktemp -d /tmp/airlock-dockerbench.XXXXXX)
chmod 755 "$work"
export AIRLOCK_STATE_DIR=$work/state HOME=$work
trap '"$work/airlock" kill --all >/dev/null 2>&1 || true; "$work/airlock" prune >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
build_airlock "$work/airlock"
mkdir -p "$work/ws" && chmod 777 "$work/ws"
cd "$work/ws"

echo "== 1. start-up ($RUNS runs each; ms)"
hyperfine -N --warmup 3 --runs "$RUNS" --export-json "$work/start.json" \
	-n "airlock run --backend docker" "$work/airlock run -q --backend docker --image $IMAGE -- /bin/true" \
	-n "docker run --rm" "docker run --rm --network none $IMAGE /bin/true" >/dev/null
jq -r '.results[] | [.command, (.mean*1000), (.median*1000), (.stddev*1000)] | @tsv' "$work/start.json" |
	awk -F'\t' 'BEGIN{printf "%-30s %8s %8s %8s\n","command","mean","median","stddev"} {printf "%-30s %8.1f %8.1f %8.1f\n",$1,$2,$3,$4}'
jq -r '.results | (map(select(.command=="airlock run --backend docker"))[0].median) / (map(select(.command=="docker run --rm"))[0].median) | "ratio airlock / docker run (median): \(. * 100 | round / 100)x (goal <= 1.2x)"' "$work/start.json"

echo "== 2. airlock exec into a running docker sandbox"
id=$("$work/airlock" run -d -q --backend docker --image "$IMAGE")
hyperfine -N --warmup 5 --runs "$RUNS" --export-json "$work/exec.json" \
	-n "airlock exec" "$work/airlock exec $id -- /bin/true" >/dev/null
jq -r '.results[] | "\(.command): mean \(.mean*1000 | . * 10 | round / 10) ms, median \(.median*1000 | . * 10 | round / 10) ms"' "$work/exec.json"
"$work/airlock" kill "$id" >/dev/null

echo "== 3. the gateway through the explicit front door, from a container"
cd - >/dev/null
MODES=proxy RUN_FLAGS="--backend docker --image $IMAGE" SIZE_MB=${SIZE_MB:-256} N=${N:-500} bench/gateway.sh
