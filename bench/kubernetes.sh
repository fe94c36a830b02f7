#!/usr/bin/env bash
# The kubernetes backend, side by side in one run on the same cluster (the
# single-node test cluster of .ci/kube-up unless KUBECONFIG says otherwise):
#   1. time to a finished sandbox, p50/p95 over RUNS: `airlock run --backend
#      kubernetes -- true` beside `kubectl run --restart=Never` of the same
#      image, waited for until the Pod has Succeeded (create, schedule, start,
#      exit, status back through the API server); deletion not timed
#   2. 50 at once (PAR): wall time until all 50 finished and how many failed,
#      each way; then 50 detached sandboxes: the supervisors' memory (RSS)
#      per sandbox, and the API server's and kubelet's growth with them
#   3. the API server as a data path: bytes out of a Pod through `kubectl
#      exec` (the stream a relay to the gateway rides), MB/s and the API
#      server's and kubelet's CPU per GiB
#   4. an HTTPS download through the gateway from a Pod beside the same
#      download from the native backend (bench/gateway.sh's section 1, each
#      row paired with a direct download on the host)
# The airlock rows need `airlock run --backend kubernetes`; where this build
# has none they print "skipped: backend not available" and the kubectl rows
# still run. Needs root (the cluster's containerd, port 443 for 3), jq, curl.
#
#   .ci/kube-up && bench/kubernetes.sh
#   RUNS=50 PAR=100 IMAGE=airlock/minimal:latest bench/kubernetes.sh
#   SECTIONS=2 bench/kubernetes.sh          # only section 2 (any of 1234)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-20}
PAR=${PAR:-50}
IMAGE=${IMAGE:-airlock/minimal:latest}
SIZE_MB=${SIZE_MB:-256}
SECTIONS=${SECTIONS:-1234}
export KUBECONFIG=${KUBECONFIG:-/var/lib/airlock-kube/admin.kubeconfig}
KUBECTL=${KUBECTL:-$(ls /var/cache/airlock-kube/v*/bin/kubectl 2>/dev/null | tail -n 1)}
CTR_SOCK=/run/airlock-kube/containerd/containerd.sock
NS=${NS:-default}
need jq jq
need curl curl
[ -x "${KUBECTL:-}" ] || KUBECTL=$(command -v kubectl) || { echo "bench: no kubectl: run .ci/kube-up (it builds one) or set KUBECTL" >&2; exit 1; }
k() { "$KUBECTL" --request-timeout=30s -n "$NS" "$@"; }
k get --raw /readyz >/dev/null 2>&1 || { echo "bench: no cluster answers at $KUBECONFIG: run .ci/kube-up" >&2; exit 1; }

# The image, in the cluster's containerd (imported from docker when missing).
if [ -S "$CTR_SOCK" ]; then
	ref=$IMAGE
	[[ ${ref%%/*} == *.* ]] || ref=docker.io/$ref
	if ! ctr -a "$CTR_SOCK" -n k8s.io images ls -q | grep -qx "$ref"; then
		.ci/kube-import "$IMAGE"
	fi
fi

work=$(mktemp -d /tmp/airlock-kubebench.XXXXXX)
chmod 755 "$work"
export AIRLOCK_STATE_DIR=$work/state
run_id=kb$$
cleanup() {
	"$work/airlock" kill --all >/dev/null 2>&1 || true
	"$work/airlock" prune >/dev/null 2>&1 || true
	k delete pods -l "airlock-bench=$run_id" --wait=false --grace-period=0 --force >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
build_airlock "$work/airlock"
mkdir -p "$work/ws" && chmod 777 "$work/ws"

# The guest image (kubernetes.image: an image whose /airlock is this very
# binary, so host and guest speak one protocol), made here as a one-layer
# docker archive and imported under a tag of this run, named in a config
# file of this run. GUEST_IMAGE names one already in the cluster instead.
guest=${GUEST_IMAGE:-}
if [ -z "$guest" ] && [ -S "$CTR_SOCK" ]; then
	guest=airlock.local/guest:bench-$run_id
	mkdir -p "$work/guest/root" && cp "$work/airlock" "$work/guest/root/airlock"
	tar --owner=0 --group=0 --numeric-owner -C "$work/guest/root" -cf "$work/guest/layer.tar" airlock
	printf '{"architecture":"amd64","os":"linux","config":{},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
		"$(sha256sum "$work/guest/layer.tar" | cut -d' ' -f1)" >"$work/guest/config.json"
	printf '[{"Config":"config.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$guest" >"$work/guest/manifest.json"
	tar -C "$work/guest" -cf - manifest.json config.json layer.tar | ctr -a "$CTR_SOCK" -n k8s.io images import - >/dev/null
	trap 'cleanup; ctr -a "$CTR_SOCK" -n k8s.io images rm "$guest" >/dev/null 2>&1 || true' EXIT
fi
if [ -n "$guest" ]; then
	mkdir -p "$work/config/airlock"
	# A long ready timeout: section 2 measures how long the node takes to
	# start PAR sandboxes, not whether they fit the default 90 s.
	printf 'kubernetes:\n  image: %s\n  ready_timeout: %s\n' "$guest" "${READY_TIMEOUT:-5m}" >"$work/config/airlock/config.yaml"
	export XDG_CONFIG_HOME=$work/config
fi

# The airlock side exists once the backend does.
kflags=(--backend kubernetes --image "$IMAGE")
have_backend=0
if (cd "$work/ws" && timeout 300 "$work/airlock" run -q "${kflags[@]}" -- true) >"$work/probe.log" 2>&1; then
	have_backend=1
else
	echo "airlock --backend kubernetes: skipped: backend not available ($(head -c 200 "$work/probe.log" | tr '\n' ' '))"
fi

ms() { echo $(($(date +%s%N) / 1000000)); }
# pct LABEL: p50/p95/mean of the numbers on stdin (ms)
pct() { sort -n | awk -v l="$1" '{a[NR]=$1; s+=$1} END{if (NR == 0) {printf "%-34s no samples\n", l; exit} i95=int(NR*0.95+0.5); if (i95 < 1) i95=1; if (i95 > NR) i95=NR; printf "%-34s p50 %6d  p95 %6d  mean %6.0f ms  (n=%d)\n", l, a[int((NR+1)/2)], a[i95], s/NR, NR}'; }
kubectl_once() { # NAME: create, wait until Succeeded; prints ms or FAIL
	local t
	t=$(ms)
	if k run "$1" --image="$IMAGE" --image-pull-policy=Never --restart=Never -l "airlock-bench=$run_id" \
		--overrides='{"spec":{"automountServiceAccountToken":false,"terminationGracePeriodSeconds":0}}' \
		--command -- true >/dev/null 2>"$work/$1.err" &&
		k wait "pod/$1" --for=jsonpath='{.status.phase}'=Succeeded --timeout=120s >/dev/null 2>>"$work/$1.err"; then
		echo $(($(ms) - t))
	else
		echo FAIL
	fi
}
airlock_once() {
	local t
	t=$(ms)
	if (cd "$work/ws" && "$work/airlock" run -q "${kflags[@]}" -- true) >/dev/null 2>>"$work/airlock.err"; then
		echo $(($(ms) - t))
	else
		echo FAIL
	fi
}

echo "== load average at start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
if [[ $SECTIONS == *1* ]]; then
echo "== 1. time to a finished sandbox of $IMAGE, $RUNS runs each (one at a time)"
: >"$work/k1" && : >"$work/a1"
for i in $(seq "$RUNS"); do
	kubectl_once "kb-$run_id-s$i" >>"$work/k1"
	[ $have_backend = 0 ] || airlock_once >>"$work/a1"
done
k delete pods -l "airlock-bench=$run_id" --wait=false >/dev/null 2>&1 || true
grep -v FAIL "$work/k1" | pct "kubectl run --restart=Never + wait"
if [ $have_backend = 1 ]; then
	grep -v FAIL "$work/a1" | pct "airlock run --backend kubernetes"
	a=$(grep -v FAIL "$work/a1" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
	b=$(grep -v FAIL "$work/k1" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
	awk -v a="$a" -v b="$b" 'BEGIN{if (b > 0) printf "ratio airlock / kubectl run (p50): %.2fx\n", a/b}'
fi
echo "failures: kubectl $(grep -c FAIL "$work/k1" || true)$([ $have_backend = 0 ] || echo ", airlock $(grep -c FAIL "$work/a1" || true)")"
fi

rss_of() { ps -o rss= -p "$1" 2>/dev/null | awk '{s+=$1} END{print s+0}'; } # KiB
comp_rss() { rss_of "$(cat /run/airlock-kube/"$1".pid 2>/dev/null || echo 0)"; }

if [[ $SECTIONS == *2* ]]; then
echo "== 2. $PAR at once"
api0=$(comp_rss kube-apiserver) kubelet0=$(comp_rss kubelet)
t=$(ms)
for i in $(seq "$PAR"); do kubectl_once "kb-$run_id-p$i" >"$work/kp$i" & done
wait
wall=$(($(ms) - t))
fails=$(cat "$work"/kp* | grep -c FAIL || true)
printf '%-34s wall %6d ms, %d of %d failed\n' "kubectl run x$PAR + wait" "$wall" "$fails" "$PAR"
k delete pods -l "airlock-bench=$run_id" --wait=false >/dev/null 2>&1 || true
# The cluster alone, without $PAR kubectl processes starting: one create of
# $PAR Pods and one wait for them all.
for i in $(seq "$PAR"); do
	printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"kb-%s-l%d","labels":{"airlock-bench":"%s","airlock-bench-list":"1"}},"spec":{"restartPolicy":"Never","automountServiceAccountToken":false,"terminationGracePeriodSeconds":0,"containers":[{"name":"c","image":"%s","imagePullPolicy":"Never","command":["true"]}]}}\n' "$run_id" "$i" "$run_id" "$IMAGE"
done | jq -s '{apiVersion: "v1", kind: "List", items: .}' >"$work/list.json"
t=$(ms)
if k create -f "$work/list.json" >/dev/null && k wait pods -l "airlock-bench=$run_id,airlock-bench-list=1" --for=jsonpath='{.status.phase}'=Succeeded --timeout=300s >/dev/null; then
	printf '%-34s wall %6d ms\n' "one create of $PAR Pods + one wait" "$(($(ms) - t))"
else
	echo "one create of $PAR Pods + one wait: FAILED after $(($(ms) - t)) ms"
fi
k delete pods -l "airlock-bench=$run_id" --wait=false >/dev/null 2>&1 || true
if [ $have_backend = 1 ]; then
	t=$(ms)
	for i in $(seq "$PAR"); do airlock_once >"$work/ap$i" & done
	wait
	wall=$(($(ms) - t))
	fails=$(cat "$work"/ap* | grep -c FAIL || true)
	printf '%-34s wall %6d ms, %d of %d failed\n' "airlock run x$PAR" "$wall" "$fails" "$PAR"
	[ "$fails" = 0 ] || { echo "  first errors:"; head -n 5 "$work/airlock.err" | sed 's/^/  /'; }

	# Detached: every supervisor (with its gateway and API streams) stays.
	ids=()
	: >"$work/detached.err"
	t=$(ms)
	for i in $(seq "$PAR"); do
		(cd "$work/ws" && "$work/airlock" run -d -q "${kflags[@]}" -- sleep 600) >"$work/d$i" 2>>"$work/detached.err" &
	done
	wait
	printf '%-34s wall %6d ms, %d of %d failed\n' "airlock run -d x$PAR" "$(($(ms) - t))" "$(grep -c . "$work/detached.err" || true)" "$PAR"
	[ ! -s "$work/detached.err" ] || { echo "  first errors:"; head -n 3 "$work/detached.err" | sed 's/^/  /'; }
	for i in $(seq "$PAR"); do id=$(cat "$work/d$i"); [ -z "$id" ] || ids+=("$id"); done
	sleep 2
	total=0
	for id in "${ids[@]}"; do
		pid=$("$work/airlock" get "$id" 2>/dev/null | jq -r '.pid // empty')
		[ -z "$pid" ] || total=$((total + $(rss_of "$pid")))
	done
	api1=$(comp_rss kube-apiserver) kubelet1=$(comp_rss kubelet)
	if [ ${#ids[@]} -gt 0 ]; then
		awk -v n=${#ids[@]} -v s="$total" -v a0="$api0" -v a1="$api1" -v k0="$kubelet0" -v k1="$kubelet1" 'BEGIN{
			printf "%d detached sandboxes: supervisor RSS %.1f MiB per sandbox (%.0f MiB in all)\n", n, s/n/1024, s/1024
			printf "  kube-apiserver RSS %+.1f MiB, kubelet RSS %+.1f MiB while they run (%.2f / %.2f MiB per sandbox)\n", (a1-a0)/1024, (k1-k0)/1024, (a1-a0)/1024/n, (k1-k0)/1024/n}'
	fi
	"$work/airlock" kill --all >/dev/null 2>&1 || true
fi
fi

if [[ $SECTIONS == *3* ]]; then
echo "== 3. the API server as a data path: $SIZE_MB MiB out of a Pod through \`kubectl exec\` (the kind of stream a relay rides: exec here, port-forward alike)"
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; } # clock ticks
k run "kb-$run_id-x" --image="$IMAGE" --image-pull-policy=Never --restart=Never -l "airlock-bench=$run_id" \
	--overrides='{"spec":{"automountServiceAccountToken":false,"terminationGracePeriodSeconds":0}}' --command -- sleep 600 >/dev/null
if k wait "pod/kb-$run_id-x" --for=condition=Ready --timeout=60s >/dev/null; then
	apid=$(cat /run/airlock-kube/kube-apiserver.pid 2>/dev/null || echo 0)
	kpid=$(cat /run/airlock-kube/kubelet.pid 2>/dev/null || echo 0)
	c0=$(cpu_of "$apid") l0=$(cpu_of "$kpid")
	t=$(ms)
	n=$(k exec "kb-$run_id-x" -- head -c $((SIZE_MB << 20)) /dev/zero | wc -c)
	dt=$(($(ms) - t))
	c1=$(cpu_of "$apid") l1=$(cpu_of "$kpid")
	awk -v n="$n" -v dt="$dt" -v a=$((c1 - c0)) -v l=$((l1 - l0)) -v hz="$(getconf CLK_TCK)" 'BEGIN{
		printf "kubectl exec stream: %d MiB in %d ms = %.0f MB/s; CPU per GiB: kube-apiserver %.2f s, kubelet %.2f s\n", n/1048576, dt, n/dt/1000, a/hz/(n/1073741824), l/hz/(n/1073741824)}'
fi
k delete pod "kb-$run_id-x" --wait=false --grace-period=0 --force >/dev/null 2>&1 || true
fi

if [[ $SECTIONS == *4* ]]; then
echo "== 4. HTTPS download of $SIZE_MB MiB through the gateway: a Pod beside the native backend"
echo "-- native"
SIZE_MB=$SIZE_MB DOWNLOAD_ONLY=1 MODES=${NATIVE_MODES:-transparent} bench/gateway.sh | grep -v '^== ' | grep '^gateway' || true
if [ $have_backend = 1 ]; then
	echo "-- kubernetes"
	SIZE_MB=$SIZE_MB DOWNLOAD_ONLY=1 MODES=${KUBE_MODES:-proxy} RUN_FLAGS="${kflags[*]}" bench/gateway.sh | grep -v '^== ' | grep '^gateway' || true
else
	echo "kubernetes: skipped: backend not available"
fi
fi
