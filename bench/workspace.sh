#!/usr/bin/env bash
# Workspace benchmarks, side by side in one run:
#  1. start-up of `airlock run --workspace-mode overlay -- /bin/true` in an
#     empty workspace and in one of 100,000 files (goal: equal within noise;
#     overlay takes its manifest in the background once the sandbox runs),
#     with bind mode beside them (its manifest is also taken in the
#     background; a command as short as /bin/true ends before it, which
#     then stops, and the review is one stat-only scan after the exit,
#     which find's stat walk of the tree is printed beside);
#  2. manifest hashing of the 100,000-file tree — cold (no cache) and warm
#     (hash cache from a previous run) — beside `sha256sum` over the same
#     files (goal: >= 1x, from parallel hashing and the cache).
#
#   bench/workspace.sh              # 100,000 files of 1 KiB
#   FILES=20000 SIZE=4096 RUNS=20 bench/workspace.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
FILES=${FILES:-100000}
SIZE=${SIZE:-1024}
RUNS=${RUNS:-30}
need hyperfine hyperfine
need jq jq

work=$(mktemp -d /tmp/airlock-wsbench.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
build_airlock "$work/airlock"
CGO_ENABLED=0 go build -o "$work/wsbench" ./bench/wsbench
mkdir -p "$work/empty" "$work/big" "$work/state" "$work/home"
echo "making $FILES files of $SIZE bytes..." >&2
"$work/wsbench" mktree "$work/big" "$FILES" "$SIZE"
sleep 1 # let ctimes settle, so the hash cache may keep them

al="env AIRLOCK_STATE_DIR=$work/state HOME=$work/home $work/airlock run -q"
hyperfine -N --warmup 3 --runs "$RUNS" --export-json "$work/start.json" \
	-n "overlay, empty" "$al --workspace-mode overlay -w $work/empty -- /bin/true" \
	-n "overlay, $FILES files" "$al --workspace-mode overlay -w $work/big -- /bin/true" \
	-n "bind, empty" "$al -w $work/empty -- /bin/true" \
	-n "bind, $FILES files" "$al -w $work/big -- /bin/true" \
	-n "find, stat of $FILES files" "find $work/big -printf '%i %C@\n'" >/dev/null

# One file list for sha256sum, made outside the timing.
(cd "$work/big" && find . -type f -print0 > "$work/files")
"$work/wsbench" manifest -cache "$work/warm.cache" "$work/big" 2>/dev/null # fill the warm cache
hyperfine -N --warmup 2 --runs "$((RUNS < 10 ? RUNS : 10))" --export-json "$work/hash.json" \
	-n "sha256sum" "sh -c 'cd $work/big && xargs -0 sha256sum < $work/files > /dev/null'" \
	-n "manifest, cold" "$work/wsbench manifest $work/big" \
	-n "manifest, cached" "$work/wsbench manifest -cache $work/warm.cache $work/big" >/dev/null

table() {
	jq -r '.results[] | [.command, (.mean*1000), (.median*1000), (.stddev*1000)] | @tsv' "$1" |
		awk -F'\t' 'BEGIN{printf "%-34s %9s %9s %9s\n","command","mean","median","stddev"} {printf "%-34s %9.2f %9.2f %9.2f\n",$1,$2,$3,$4}'
}
echo "== start-up: airlock run -- /bin/true ($RUNS runs; ms) =="
table "$work/start.json"
jq -r --arg n "overlay, $FILES files" '.results | (map(select(.command==$n))[0].median) / (map(select(.command=="overlay, empty"))[0].median) | "ratio overlay big / empty (median): \(. * 100 | round / 100)x"' "$work/start.json"
jq -r --arg n "bind, $FILES files" --arg f "find, stat of $FILES files" '.results | ((map(select(.command==$n))[0].median) - (map(select(.command=="bind, empty"))[0].median)) / (map(select(.command==$f))[0].median) | "bind big - empty, over find'"'"'s stat walk (median): \(. * 100 | round / 100)x"' "$work/start.json"
echo
echo "== manifest of $FILES files x $SIZE bytes ($(nproc) CPUs; ms) =="
table "$work/hash.json"
jq -r '.results | (map(select(.command=="sha256sum"))[0].median) as $s |
	"speed vs sha256sum (median): cold \($s / (map(select(.command=="manifest, cold"))[0].median) * 100 | round / 100)x, cached \($s / (map(select(.command=="manifest, cached"))[0].median) * 100 | round / 100)x"' "$work/hash.json"
