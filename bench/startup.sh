#!/usr/bin/env bash
# Sandbox start-up, side by side in one run, printed against issue 17's bars:
#   airlock run -- /bin/true       ≤ 2× bubblewrap (unprivileged), ≤ 2.5× (root, cgroup limits)
#   exec round trip (execlat) p50  ≤ 0.5 ms
#   airlock exec CLI end to end    ≤ 2× a Go hello-world binary's start
#   idle run -d, supervisor+guest  ≤ 20 MiB RSS
# Beside the exec bars it prints what no exec of this binary goes below:
# its own start (airlock version) and the command's (/bin/true, started
# without a sandbox). bubblewrap does the same as the run (all namespaces,
# read-only root, fresh /proc, /dev, /tmp); both are also run on one CPU
# (taskset). AIRLOCK_TRACE=1 airlock run ... shows where a start's
# milliseconds go. The commands compared run in turn, one run each
# (bench/alternate), so drift on a noisy machine falls on all alike.
#
#   bench/startup.sh                  # as the current user
#   RUNS=300 bench/startup.sh         # more runs
#   AS_USER=65534 bench/startup.sh    # as root, also measure as an unprivileged uid
#   BASELINE=/tmp/airlock-old bench/startup.sh   # another build beside this one
#   SPACED_RUNS=50 bench/startup.sh   # runs 0.2 s apart (default: a quarter of RUNS)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-200}
SPACED_RUNS=${SPACED_RUNS:-$(((RUNS + 3) / 4))}
need bwrap bubblewrap
need taskset util-linux

work=$(mktemp -d /tmp/airlock-bench.XXXXXX)
trap 'AIRLOCK_STATE_DIR=$work/state "$work/airlock" kill --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
chmod 755 "$work"
build_airlock "$work/airlock"
CGO_ENABLED=0 go build -o "$work/execlat" ./bench/execlat
CGO_ENABLED=0 go build -o "$work/alternate" ./bench/alternate
# The exec bar's yardstick: the start of the smallest Go program.
build_hello_go "$work"
if [ -n "${BASELINE:-}" ]; then
	cp "$BASELINE" "$work/airlock-baseline"
fi
# A file the Go linker has just written (through mmap) starts ~18% slower
# than the same bytes written by cp, until its page cache is dropped; so
# every binary timed here is written the same way, by cp.
for b in airlock hello-go; do
	cp "$work/$b" "$work/$b.cp" && mv "$work/$b.cp" "$work/$b"
done
mkdir -p "$work/ws" && chmod 777 "$work/ws"
cd "$work/ws"

ms() { awk '{printf "%.2f", $1*1000}'; }
median() { awk -F'\t' -v c="$2" '$1==c{print $3}' "$1"; }
# ratio FILE NAME: median of NAME's per-round ratios to the file's first command
ratio() { awk -F'\t' -v c="$2" '$1==c{print $6}' "$1"; }

# rss PID: resident KiB of a process
rss() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
# idle_kib STATE ID: resident KiB of a detached sandbox's supervisor and
# guest, then the anonymous part of it. The rest is their executables'
# page cache, which every sandbox shares; where the cache holds the file in
# large folios (as after a re-read), each page touched maps its whole 2 MiB
# huge page, so that part varies with the cache's history, not the sandbox.
idle_kib() {
	local sup guest
	sup=$(pgrep -f "__supervise $1/sandboxes/$2" | head -1)
	guest=$(pgrep -P "$sup" | head -1)
	echo $(($(rss "$sup" VmRSS) + $(rss "$guest" VmRSS))) $(($(rss "$sup" RssAnon) + $(rss "$guest" RssAnon)))
}

# measure LABEL [PREFIX...]: everything, with an optional command prefix (setpriv for another uid)
measure() {
	local label=$1; shift
	local pre=("$@")
	local state="$work/state-$label"
	mkdir -p "$state" && chmod 777 "$state"
	local envs="env AIRLOCK_STATE_DIR=$state HOME=$work"
	# for alternate, which sets them itself: bwrap and the Go hello world
	# run without an env(1) before them, and so does airlock
	local vars="AIRLOCK_STATE_DIR=$state HOME=$work"
	local bw="bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-all --die-with-parent /bin/true"
	# one run of each in turn, so the machine's drift is shared
	local cmds=("airlock run=$vars ${pre[*]} $work/airlock run -q -- /bin/true")
	if [ -n "${BASELINE:-}" ]; then
		cmds+=("baseline run=$vars ${pre[*]} $work/airlock-baseline run -q -- /bin/true")
	fi
	"$work/alternate" -n "$RUNS" -warmup 10 "${cmds[@]}" \
		"bwrap=${pre[*]} $bw" "/bin/true=${pre[*]} /bin/true" >"$work/$label.tsv"
	# The same, 0.2 s apart, as an agent harness runs its commands: back to
	# back, each run finds the CPUs awake and the kernel's RCU machinery
	# busy, and hides what an isolated run waits for (a cgroup v1 move
	# waited ~19 ms).
	"$work/alternate" -n "$SPACED_RUNS" -warmup 3 -gap 200ms "${cmds[@]}" \
		"bwrap=${pre[*]} $bw" >"$work/$label-spaced.tsv"
	# The same on one CPU: how much of a run's time a second CPU hides.
	# Where it hides little, the run is its processes' CPU work (two Go
	# runtimes' starts, the kernel's namespace and mount work), and only
	# less of that work makes it faster, not more overlap.
	"$work/alternate" -n "$SPACED_RUNS" -warmup 3 "airlock run=$vars taskset -c 0 ${pre[*]} $work/airlock run -q -- /bin/true" \
		"bwrap=taskset -c 0 ${pre[*]} $bw" >"$work/$label-onecpu.tsv"

	# exec into a running sandbox, beside a Go hello world's start
	local id bid=
	id=$(${pre[@]+"${pre[@]}"} $envs "$work/airlock" run -d -q)
	if [ -n "${BASELINE:-}" ]; then
		bid=$(${pre[@]+"${pre[@]}"} $envs "$work/airlock-baseline" run -d -q)
	fi
	# idle memory: a sandbox left alone past the guest's and supervisor's
	# idle trim (2 s and 1 s), before anything is run in it
	sleep 3
	local kib bkib=
	kib=$(idle_kib "$state" "$id")
	if [ -n "$bid" ]; then
		bkib=$(idle_kib "$state" "$bid")
	fi
	local ecmds=("airlock exec=$vars ${pre[*]} $work/airlock exec $id -- /bin/true")
	if [ -n "$bid" ]; then
		ecmds+=("baseline exec=$vars ${pre[*]} $work/airlock-baseline exec $bid -- /bin/true")
	fi
	# What no exec CLI of this binary goes below: its own start (airlock
	# version), which any airlock command pays, and the command's (run here
	# as the guest runs it: with no setpriv before it).
	"$work/alternate" -n "$RUNS" -warmup 20 "${ecmds[@]}" \
		"Go hello world=${pre[*]} $work/hello-go" "airlock version=${pre[*]} $work/airlock version" \
		"/bin/true alone=/bin/true" >"$work/$label-exec.tsv"
	local lat blat=
	lat=$(${pre[@]+"${pre[@]}"} $envs "$work/execlat" -n 1000 "$id")
	if [ -n "$bid" ]; then
		blat=$(${pre[@]+"${pre[@]}"} $envs "$work/execlat" -n 1000 "$bid")
		${pre[@]+"${pre[@]}"} $envs "$work/airlock-baseline" kill "$bid" >/dev/null
	fi
	${pre[@]+"${pre[@]}"} $envs "$work/airlock" kill "$id" >/dev/null
	# The same into a sandbox whose first command still runs, as an agent's
	# does: the guest then waits on a child between execs (a wait that once
	# held its only P, 2 ms per exec).
	# busy_lat BIN: the round trip into a sandbox of BIN running sleep
	busy_lat() {
		local sb
		sb=$(${pre[@]+"${pre[@]}"} $envs "$1" run -d -q -- sleep 1000000)
		${pre[@]+"${pre[@]}"} $envs "$work/execlat" -n 500 "$sb" | head -1
		${pre[@]+"${pre[@]}"} $envs "$1" kill "$sb" >/dev/null
	}
	local busylat bbusylat=
	busylat=$(busy_lat "$work/airlock")
	if [ -n "${BASELINE:-}" ]; then
		bbusylat=$(busy_lat "$work/airlock-baseline")
	fi

	echo "== $label ($RUNS runs each; times in ms) =="
	cat "$work/$label.tsv" "$work/$label-exec.tsv" |
		awk -F'\t' 'BEGIN{printf "%-16s %8s %8s %8s %8s\n","command","mean","median","p10","p90"} {printf "%-16s %8.2f %8.2f %8.2f %8.2f\n",$1,$2,$3,$4,$5}'
	local run bw1 ex hello
	run=$(median "$work/$label.tsv" "airlock run")
	bw1=$(median "$work/$label.tsv" "bwrap")
	ex=$(median "$work/$label-exec.tsv" "airlock exec")
	hello=$(median "$work/$label-exec.tsv" "Go hello world")
	local bar=2
	[ "$label" = "uid-0" ] && bar=2.5
	awk -v a="$run" -v b="$bw1" -v bar="$bar" 'BEGIN{printf "bar: airlock run / bwrap (median) %.2fx (bar %sx)\n", a/b, bar}'
	awk -F'\t' -v n="$SPACED_RUNS" '$1=="airlock run"{a=$3} $1=="bwrap"{b=$3} $1=="baseline run"{c=$3}
		END{printf "     0.2 s apart (%d runs each): airlock run %.2f ms, bwrap %.2f ms: %.2fx", n, a, b, a/b; if (c) printf "; baseline run %.2f ms", c; printf "\n"}' "$work/$label-spaced.tsv"
	awk -F'\t' -v n="$SPACED_RUNS" -v all="$run" '$1=="airlock run"{a=$3} $1=="bwrap"{b=$3}
		END{printf "     on one CPU (taskset -c 0, %d runs each): airlock run %.2f ms (%.2fx its time on all CPUs), bwrap %.2f ms\n", n, a, a/all, b}' "$work/$label-onecpu.tsv"
	if [ -n "${BASELINE:-}" ]; then
		awk -v a="$(median "$work/$label.tsv" "baseline run")" -v b="$bw1" 'BEGIN{printf "     baseline run / bwrap (median) %.2fx\n", a/b}'
		echo "     baseline run / airlock run, median of per-round ratios: $(ratio "$work/$label.tsv" "baseline run")"
		echo "     baseline exec / airlock exec, median of per-round ratios: $(ratio "$work/$label-exec.tsv" "baseline exec")"
	fi
	awk -v a="$ex" -v b="$hello" 'BEGIN{printf "bar: airlock exec / Go hello world (median) %.2fx (bar 2x)\n", a/b}'
	awk -v v="$(median "$work/$label-exec.tsv" "airlock version")" -v t="$(median "$work/$label-exec.tsv" "/bin/true alone")" -v b="$hello" \
		'BEGIN{printf "     floor: airlock version %.2f ms (%.2fx) + /bin/true %.2f ms = %.2fx the Go hello world\n", v, v/b, t, (v+t)/b}'
	echo "$lat" | sed '1s/^/bar: /; 1s/$/ (bar p50 0.5 ms)/'
	[ -z "$blat" ] || echo "$blat" | sed '1s/^/     baseline sandbox: /; 2s/^     /     baseline sandbox: /'
	echo "$busylat" | sed 's/^exec round trip/     while its first command runs: exec round trip/'
	[ -z "$bbusylat" ] || echo "$bbusylat" | sed 's/^exec round trip/     baseline sandbox, while its first command runs: exec round trip/'
	echo "$kib" | awk '{printf "bar: idle run -d, supervisor + guest RSS %.1f MiB, of it anonymous %.1f MiB (bar 20 MiB)\n", $1/1024, $2/1024}'
	if [ -n "$bkib" ]; then
		echo "$bkib" | awk '{printf "     baseline idle run -d RSS %.1f MiB, of it anonymous %.1f MiB\n", $1/1024, $2/1024}'
	fi
	echo
}

measure "uid-$(id -u)"
if [ -n "${AS_USER:-}" ] && [ "$(id -u)" = 0 ]; then
	measure "uid-$AS_USER" setpriv --reuid="$AS_USER" --regid="$AS_USER" --clear-groups
fi
