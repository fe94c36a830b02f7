package layout

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/airlock-dev/airlock/"

// rule forbids packages matching from to import packages matching to.
type rule struct {
	from, to []string // prefixes under the module; "!" before one excludes it
	why      string
}

var rules = []rule{
	{[]string{"internal/policy"}, []string{"internal/", "sandbox", "cmd/"},
		"policy decides from data alone: it imports nothing of ours, so it can be table-tested and fuzzed without any I/O"},
	{[]string{"internal/backend/"}, []string{"internal/policy", "internal/gateway", "internal/egress", "internal/workspace", "internal/engine", "internal/supervisor", "internal/audit", "internal/config", "internal/secrets"},
		"a backend only starts a sandbox from the neutral spec: policy, gateway, workspace review and audit are the engine's and never know which backend runs"},
	{[]string{"internal/", "sandbox", "cmd/", "!internal/engine", "!internal/backend/", "!internal/layout"}, []string{"internal/backend/native", "internal/backend/docker", "internal/backend/vm", "internal/backend/kubernetes"},
		"only the engine chooses and assembles backends: no backend branch anywhere else"},
	{[]string{"sandbox"}, []string{"internal/supervisor", "cmd/"},
		"the public API is a host of the engine, not of the CLI's runner"},
	{[]string{"internal/guest", "internal/proto", "internal/seccomp"}, []string{"internal/gateway", "internal/netstack", "internal/dnsserver", "internal/egress", "internal/engine", "internal/backend/", "internal/dockerengine"},
		"the guest (PID 1 inside) needs the protocol and lockdown only: host-side networking and backends stay out of it"},
	{[]string{"internal/link"}, []string{"internal/", "gvisor.dev/"},
		"a link is a leaf type so backends can hand one over without importing the network stack"},
	{[]string{"internal/vmimage"}, []string{"internal/", "sandbox", "cmd/"},
		"vmimage keeps the VM's boot assets and imports nothing of ours, so the vm backend can find them without the image builders (docker) or the engine"},
	{[]string{"internal/vfs"}, []string{"internal/", "sandbox", "cmd/", "!internal/audit"},
		"the VFS is a low layer the VM backend and the RPC file methods both use: providers and the FUSE server know no engine, backend or workspace session (audit only for its record type)"},
	{[]string{"internal/timerslack"}, []string{"internal/", "sandbox", "cmd/"},
		"timerslack is a leaf the guest calls first thing: it imports nothing of ours"},
	{[]string{"internal/beneath"}, []string{"internal/", "sandbox", "cmd/"},
		"beneath is the one way to open a path under a root someone else writes (workspace, agent homes, host commands' directories): a leaf that imports nothing of ours"},
	{[]string{"internal/regfile"}, []string{"internal/", "sandbox", "cmd/"},
		"regfile is the one way to read a file someone else may have placed (config, secrets, App keys): a leaf that imports nothing of ours"},
	{[]string{"internal/config"}, []string{"internal/", "sandbox", "cmd/", "!internal/policy", "!internal/secrets", "!internal/regfile"},
		"config is data, validation and merging (it checks rules with policy and secret flags with secrets, both leaves, and reads files through regfile): everything else depends on it, not the other way"},
	{[]string{"internal/", "sandbox", "cmd/", "!internal/vfs"}, []string{"github.com/hanwen/go-fuse/"},
		"go-fuse is the VM side's FUSE server: only internal/vfs imports it, the one place its initialisers (which every start of the one airlock binary pays) come from"},
	{[]string{"internal/", "sandbox", "cmd/", "!internal/policy/script"}, []string{"go.starlark.net/"},
		"the Starlark interpreter is the policy script's alone: every limit on a script (steps, time, allocation, frozen snapshots) is kept in one package"},
	{[]string{"internal/", "sandbox", "cmd/", "!internal/mcpproxy"}, []string{"github.com/modelcontextprotocol/"},
		"the MCP SDK is the MCP proxy's alone: a native run without MCP servers needs none of it"},
	{[]string{"internal/", "sandbox", "cmd/", "!internal/dockerengine", "!internal/backend/docker", "!internal/images", "!internal/devcontainer", "!cmd/airlock"}, []string{"github.com/docker/"},
		"the Docker client is the docker backend's and the image builders' (airlock images, a devcontainer's build): the engine and a native run never call it"},
	{[]string{"internal/devcontainer"}, []string{"internal/engine", "internal/backend/", "internal/supervisor", "internal/gateway", "sandbox", "cmd/"},
		"a devcontainer.json is read into data and an image: the CLI puts them into the engine's spec, so the engine knows no devcontainer"},
	{[]string{"internal/", "sandbox", "cmd/", "!internal/backend/kubernetes"}, []string{"k8s.io/"},
		"client-go is the kubernetes backend's alone: its initialisers and size land on every command, so nothing else widens what is linked"},
	{[]string{"internal/", "sandbox"}, []string{"cmd/"},
		"cmd/airlock is the command line only: it imports the house, nothing imports it"},
	{[]string{"internal/agentrun", "internal/agents", "internal/supervisor"}, []string{"github.com/spf13/"},
		"agent orchestration and the supervisor are rooms the CLI calls with plain options: they know no command line, so the RPC server and the Go API can use them too"},
	{[]string{"internal/ghapp"}, []string{"internal/", "sandbox", "cmd/", "!internal/ghapp", "!internal/regfile"},
		"ghapp mints GitHub App tokens on the host and imports nothing of ours but the regfile leaf: the secrets package stays a leaf that never makes a request, and egress wires the two"},
	{[]string{"internal/cleanup", "internal/watch"}, []string{"internal/", "sandbox", "cmd/"},
		"the engine's rooms of its own are leaves: the cleanup stack knows no step, the file watcher only directories, so each is tested alone"},
	{[]string{"internal/suggest"}, []string{"internal/", "sandbox", "cmd/", "!internal/audit", "!internal/policy", "!internal/config", "!internal/secrets", "!internal/regfile"},
		"suggest turns audit records into config as data: it reads the records, checks rules with policy and config, and does no I/O of its own, so it is table-tested and fuzzed"},
	{[]string{"internal/childspec"}, []string{"internal/", "sandbox", "cmd/", "!internal/config", "!internal/secrets"},
		"a child sandbox's spec is config's data on the wire: hostexec and the MCP proxy make one without knowing the engine or the CLI that reads it"},
	{[]string{"internal/asker"}, []string{"internal/engine", "internal/egress", "internal/backend", "internal/workspace", "internal/supervisor", "sandbox", "cmd/"},
		"the approvals asker meets the gateway through its Gate and the audit stream through a function: it knows no engine, egress, backend or workspace, so its decisions are tested without a sandbox"},
	{[]string{"internal/publish"}, []string{"internal/", "sandbox", "cmd/", "!internal/audit", "!internal/config"},
		"published ports meet the sandbox through a Dial function (the netstack's or the guest's, which the engine picks): the listeners know no engine, egress, netstack or backend, so they are tested with plain sockets"},
	{[]string{"internal/otlp"}, []string{"internal/", "sandbox", "cmd/", "!internal/otlp", "!internal/audit", "!internal/config", "google.golang.org/grpc", "go.opentelemetry.io/otel/exporters", "go.opentelemetry.io/proto"},
		"the OTLP exporter is an audit sink: it knows audit records and their config, nothing of the sandbox; it encodes OTLP itself, since the official exporters and collector protos link gRPC into every airlock start (its tests decode with the protos)"},
	{[]string{"internal/", "sandbox", "cmd/"}, []string{"google.golang.org/grpc"},
		"gRPC is 13 MB and ~1.5 ms of package inits at every airlock start: nothing links it"},
}

func matches(pkg string, prefixes []string) bool {
	in := false
	for _, p := range prefixes {
		if ex, ok := strings.CutPrefix(p, "!"); ok {
			if strings.HasPrefix(pkg, mod+ex) {
				return false
			}
			continue
		}
		if strings.HasPrefix(pkg, mod+p) || strings.HasPrefix(pkg, p) {
			in = true
		}
	}
	return in
}

func TestDependenciesPointDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		seen++
		for _, r := range rules {
			if !matches(p.ImportPath, r.from) {
				continue
			}
			for _, imp := range p.Imports {
				if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") { // not the standard library
					if matches(imp, r.to) && imp != p.ImportPath {
						t.Errorf("%s imports %s: %s", strings.TrimPrefix(p.ImportPath, mod), strings.TrimPrefix(imp, mod), r.why)
					}
				}
			}
		}
	}
	if seen < 20 {
		t.Fatalf("go list saw %d packages: the test is not looking at the module", seen)
	}
}

// The rules must be able to fail: each one, applied to an import it forbids,
// reports it.
func TestRulesCatchWhatTheyForbid(t *testing.T) {
	cases := []struct{ from, to string }{
		{"internal/policy", "internal/audit"},
		{"internal/backend/native", "internal/gateway"},
		{"cmd/airlock", "internal/backend/docker"},
		{"sandbox", "internal/supervisor"},
		{"internal/guest", "internal/netstack"},
		{"internal/config", "internal/state"},
		{"internal/vmimage", "internal/images"},
		{"internal/vfs", "internal/engine"},
		{"internal/vfs", "internal/backend/native"},
		{"internal/engine", "github.com/hanwen/go-fuse/v2/fuse"},
		{"internal/guest", "github.com/hanwen/go-fuse/v2/fs"},
		{"internal/engine", "github.com/modelcontextprotocol/go-sdk/mcp"},
		{"internal/engine", "github.com/docker/docker/client"},
		{"internal/gateway", "go.starlark.net/starlark"},
		{"internal/agentrun", "cmd/airlock"},
		{"internal/supervisor", "cmd/airlock"},
		{"internal/agentrun", "github.com/spf13/cobra"},
		{"internal/supervisor", "github.com/spf13/pflag"},
		{"internal/publish", "internal/netstack"},
		{"internal/suggest", "internal/state"},
		{"internal/childspec", "internal/engine"},
		{"internal/beneath", "internal/workspace"},
	}
	for _, c := range cases {
		caught := false
		for _, r := range rules {
			to := c.to
			if first, _, _ := strings.Cut(to, "/"); !strings.Contains(first, ".") {
				to = mod + to
			}
			if matches(mod+c.from, r.from) && matches(to, r.to) {
				caught = true
			}
		}
		if !caught {
			t.Errorf("no rule forbids %s importing %s", c.from, c.to)
		}
	}
	if matches(mod+"internal/engine", rules[2].from) {
		t.Error("the engine must be allowed to import backends")
	}
}
