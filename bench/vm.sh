#!/usr/bin/env bash
# The vm backend beside the native one, in one run: boot to first exec
# (`airlock run -- /bin/true`, which includes the whole boot), `airlock exec`
# into a running sandbox, and the exec round trip from a long-lived client
# (bench/execlat). Under TCG where KVM does not boot (the backend says so).
# Needs QEMU and the VM assets (airlock images build --format vm).
#
#   bench/vm.sh             # 10 boots, 200 execs each
#   RUNS=30 N=1000 bench/vm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-10}
N=${N:-200}
need hyperfine hyperfine
need jq jq
need qemu-system-x86_64 qemu-system-x86

work=$(mktemp -d /tmp/airlock-bench.XXXXXX)
state=$work/state
trap 'AIRLOCK_STATE_DIR=$state "$work/airlock" kill --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
chmod 755 "$work"
build_airlock "$work/airlock"
CGO_ENABLED=0 go build -o "$work/execlat" ./bench/execlat
mkdir -p "$work/ws" "$state"
cd "$work/ws"
# The VM assets stay in the user's data dir while HOME is the bench's own.
data=${AIRLOCK_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/airlock}
al="env AIRLOCK_STATE_DIR=$state HOME=$work AIRLOCK_DATA_DIR=$data $work/airlock"

# The first vm run probes KVM and builds the initrd for this binary: not timed.
$al run -q --backend vm -- /bin/true
hyperfine -N --warmup 1 --runs "$RUNS" --export-json "$work/run.json" \
	-n "vm: run -- true" "$al run -q --backend vm -- /bin/true" \
	-n "native: run -- true" "$al run -q -- /bin/true" >/dev/null
for b in vm native; do
	id=$($al run -d -q --backend "$b")
	hyperfine -N --warmup 3 --runs "$RUNS" --export-json "$work/exec-$b.json" \
		-n "$b: exec -- true" "$al exec $id -- /bin/true" >/dev/null
	echo "$b: exec round trip from a client, $N runs: $(env AIRLOCK_STATE_DIR="$state" HOME="$work" "$work/execlat" -n "$N" "$id")"
	$al kill "$id" >/dev/null
done
echo "== times in ms ($RUNS runs each) =="
jq -r -s '.[].results[] | [.command, (.mean*1000), (.median*1000), (.stddev*1000)] | @tsv' \
	"$work/run.json" "$work/exec-vm.json" "$work/exec-native.json" |
	awk -F'\t' 'BEGIN{printf "%-22s %9s %9s %9s\n","command","mean","median","stddev"} {printf "%-22s %9.1f %9.1f %9.1f\n",$1,$2,$3,$4}'

# Files in the workspace, timed inside the sandbox (the boot is not in it):
# the vm's workspace is the host's directory served over FUSE, the native
# one a bind mount. Small files written and read back, then an npm-install-
# like metadata storm: 2,000 files in 200 directories made, stat'ed, removed.
cat >"$work/ws/storm.py" <<'PY'
import os, sys, time
d = sys.argv[1]
def timed(f):
    t = time.perf_counter(); f(); return (time.perf_counter() - t) * 1000
os.makedirs(d + "/small"); os.makedirs(d + "/tree")
blob = b"x" * 4096
def write():
    for i in range(500):
        with open(f"{d}/small/{i}", "wb") as f: f.write(blob)
def read():
    for i in range(500):
        with open(f"{d}/small/{i}", "rb") as f: f.read()
paths = [f"{d}/tree/{i % 200}/{i}.js" for i in range(2000)]
def create():
    for i in range(200): os.mkdir(f"{d}/tree/{i}")
    for p in paths:
        with open(p, "w") as f: f.write("module.exports = 1\n")
def stat():
    for p in paths: os.stat(p)
def remove():
    for p in paths: os.unlink(p)
    for i in range(200): os.rmdir(f"{d}/tree/{i}")
print(" ".join(f"{n}={timed(f):.0f}" for n, f in
               [("write", write), ("read", read), ("create", create), ("stat", stat), ("remove", remove)]))
PY
echo "== workspace files, ms inside the sandbox (500 x 4 KiB write/read; 2,000 files in 200 dirs create/stat/remove) =="
for b in native vm; do
	rm -rf "$work/ws/files-$b"
	echo "$b: $($al run -q --backend "$b" -- python3 "$work/ws/storm.py" "$work/ws/files-$b")"
done
