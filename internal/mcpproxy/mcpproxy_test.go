package mcpproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/childspec"
	"github.com/airlock-dev/airlock/internal/mcppolicy"
	"github.com/airlock-dev/airlock/internal/secrets"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"gopkg.in/yaml.v3"
)

// The test binary is also a small stdio MCP server (fake), for what the npm
// servers cannot do on demand: crash mid-call, never answer, answer too much.
func TestMain(m *testing.M) {
	if os.Getenv("MCPPROXY_FAKE_SERVER") == "1" {
		fakeServer()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type echoArgs struct {
	Text string `json:"text,omitempty"`
}

func fakeServer() {
	s := mcp.NewServer(&mcp.Implementation{Name: "fake", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, r *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "crash"}, func(ctx context.Context, r *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
		os.Exit(3)
		return nil, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "hang"}, func(ctx context.Context, r *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
		select {} // never answers, not even to cancellation
	})
	mcp.AddTool(s, &mcp.Tool{Name: "grow"}, func(ctx context.Context, r *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
		mcp.AddTool(s, &mcp.Tool{Name: "grown"}, func(ctx context.Context, r *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{}, nil, nil
		})
		return &mcp.CallToolResult{}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "big"}, func(ctx context.Context, r *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", 2<<20)}}}, nil, nil
	})
	s.Run(context.Background(), &mcp.StdioTransport{})
}

func fakeConfig(t testing.TB, name string) ServerConfig {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return ServerConfig{Name: name, Command: []string{exe}, Env: map[string]string{"MCPPROXY_FAKE_SERVER": "1"},
		Rules: []mcppolicy.Rule{{Tool: "*", Verdict: mcppolicy.Allow, Name: "all"}}}
}

func nodeServer(t testing.TB, bin string, args ...string) []string {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed")
	}
	p, _ := filepath.Abs(filepath.Join("testdata/servers/node_modules/.bin", bin))
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s is not installed: npm ci --prefix internal/mcpproxy/testdata/servers", bin)
	}
	return append([]string{p}, args...)
}

type recorder struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (r *recorder) add(a audit.Record) { r.mu.Lock(); r.recs = append(r.recs, a); r.mu.Unlock() }
func (r *recorder) last() audit.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recs) == 0 {
		return audit.Record{}
	}
	return r.recs[len(r.recs)-1]
}

// start serves the proxy on httptest and connects an SDK client to /mcp/name.
func start(t testing.TB, servers []ServerConfig, env Env, name string, copts *mcp.ClientOptions) (*Proxy, *mcp.ClientSession) {
	t.Helper()
	if env.Launch == nil {
		env.Launch = DirectLaunch
	}
	env.LogDir = t.TempDir()
	p, err := New(servers, env)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(func() { hs.Close(); p.Close() })
	return p, connect(t, hs.URL+"/mcp/"+name, copts)
}

func connect(t testing.TB, url string, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, copts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callTool(t testing.TB, cs *mcp.ClientSession, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool(%s): %v", tool, err)
	}
	return res
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func fsConfig(t *testing.T, root string) ServerConfig {
	return ServerConfig{Name: "fs", Command: nodeServer(t, "mcp-server-filesystem", root), Roots: []string{root},
		Rules: []mcppolicy.Rule{
			{Tool: "read_text_file", Verdict: mcppolicy.Allow, When: []mcppolicy.Condition{{Arg: "path", PathWithin: []string{root}}}, Name: "read-in-roots"},
			{Tool: "write_file", Verdict: mcppolicy.Allow, When: []mcppolicy.Condition{{Arg: "path", PathWithin: []string{root}}}, Name: "write-in-roots"},
		}}
}

func TestFilesystemServerAllowedReadAndAWriteOutsideTheRootsDenied(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	outside, _ := filepath.EvalSymlinks(t.TempDir())
	os.WriteFile(filepath.Join(root, "a.txt"), []byte("hello from the root"), 0o644)
	rec := &recorder{}
	_, cs := start(t, []ServerConfig{fsConfig(t, root)}, Env{Sandbox: "sb1", Audit: rec.add}, "fs", nil)

	res := callTool(t, cs, "read_text_file", map[string]any{"path": filepath.Join(root, "a.txt")})
	if res.IsError || !strings.Contains(text(res), "hello from the root") {
		t.Fatalf("read in the root = %+v %q, want the file", res.IsError, text(res))
	}
	if r := rec.last(); r.Decision != audit.Allow || r.Rule != "read-in-roots" || r.Subject != "fs/read_text_file" || r.Extra["server"] != "fs" {
		t.Errorf("audit of the read = %+v", r)
	}

	target := filepath.Join(outside, "evil.txt")
	res = callTool(t, cs, "write_file", map[string]any{"path": target, "content": "pwned"})
	if !res.IsError || !strings.Contains(text(res), "airlock policy refused") || !strings.Contains(text(res), "do not retry") {
		t.Fatalf("write outside = %+v %q, want a policy refusal", res.IsError, text(res))
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("%s exists after a denied write (err %v)", target, err)
	}
	if r := rec.last(); r.Decision != audit.Deny || r.Extra["error"] != "true" || !strings.Contains(r.Extra["arguments"], "evil.txt") {
		t.Errorf("audit of the denied write = %+v", r)
	}
}

func TestToolsListHidesToolsNoRuleCanAllowUnlessShowDenied(t *testing.T) {
	root := t.TempDir()
	names := func(show bool) []string {
		c := fsConfig(t, root)
		c.ShowDenied = show
		_, cs := start(t, []ServerConfig{c}, Env{}, "fs", nil)
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tl := range res.Tools {
			out = append(out, tl.Name)
		}
		return out
	}
	if got := names(false); !reflect.DeepEqual(got, []string{"read_text_file", "write_file"}) {
		t.Errorf("tools/list = %v, want only the tools a rule may allow", got)
	}
	if got := names(true); len(got) < 10 {
		t.Errorf("tools/list with show_denied = %v, want every tool", got)
	}
}

func everything(t testing.TB, rules ...mcppolicy.Rule) ServerConfig {
	return ServerConfig{Name: "ev", Command: nodeServer(t, "mcp-server-everything", "stdio"), Rules: rules}
}

func TestEscalationWaitsForAHumanWithProgressThenIsApprovedOrDenied(t *testing.T) {
	var asked []approval.Request
	var mu sync.Mutex
	allow := atomic.Bool{}
	ask := func(ctx context.Context, r approval.Request) approval.Decision {
		mu.Lock()
		asked = append(asked, r)
		mu.Unlock()
		select {
		case <-time.After(450 * time.Millisecond):
		case <-ctx.Done():
			return approval.Decision{By: "canceled"}
		}
		return approval.Decision{Allow: allow.Load(), By: "test"}
	}
	var progress atomic.Int32
	copts := &mcp.ClientOptions{ProgressNotificationHandler: func(ctx context.Context, r *mcp.ProgressNotificationClientRequest) {
		if r.Params.ProgressToken == "tok" && strings.Contains(r.Params.Message, "approve ev/echo") {
			progress.Add(1)
		}
	}}
	rec := &recorder{}
	_, cs := start(t, []ServerConfig{everything(t, mcppolicy.Rule{Tool: "echo", Verdict: mcppolicy.Escalate, Name: "ask-echo"})},
		Env{Ask: ask, Audit: rec.add, ProgressEvery: 100 * time.Millisecond}, "ev", copts)

	p := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi there"}}
	p.SetProgressToken("tok")
	allow.Store(true)
	res, err := cs.CallTool(context.Background(), p)
	if err != nil || res.IsError || !strings.Contains(text(res), "hi there") {
		t.Fatalf("approved call = %v %+v %q", err, res, text(res))
	}
	if n := progress.Load(); n < 2 {
		t.Errorf("%d progress notifications while the approval waited, want ≥ 2", n)
	}
	mu.Lock()
	if len(asked) != 1 || asked[0].Kind != approval.KindMCP || asked[0].Subject != "ev/echo" || !strings.Contains(asked[0].Detail, "hi there") {
		t.Errorf("asked %+v", asked)
	}
	mu.Unlock()
	if r := rec.last(); r.Decision != audit.Allow || r.Extra["escalated"] != "true" || r.Extra["approval_by"] != "test" || r.Duration.Duration() < 400*time.Millisecond {
		t.Errorf("audit of the approved call = %+v", r)
	}

	allow.Store(false)
	res = callTool(t, cs, "echo", map[string]any{"message": "again"})
	if !res.IsError || !strings.Contains(text(res), "a human denied it") {
		t.Errorf("denied call = %q", text(res))
	}
}

func TestNobodyToAskDeniesAnEscalation(t *testing.T) {
	_, cs := start(t, []ServerConfig{everything(t, mcppolicy.Rule{Tool: "echo", Verdict: mcppolicy.Escalate})}, Env{}, "ev", nil)
	res := callTool(t, cs, "echo", map[string]any{"message": "x"})
	if !res.IsError || !strings.Contains(text(res), "nobody can approve") {
		t.Errorf("escalation without Ask = %q", text(res))
	}
}

func TestTheBreakerTripsAfterTwentyIdenticalCalls(t *testing.T) {
	rec := &recorder{}
	_, cs := start(t, []ServerConfig{everything(t, mcppolicy.Rule{Tool: "echo", Verdict: mcppolicy.Allow})}, Env{Audit: rec.add}, "ev", nil)
	for i := range 20 {
		if res := callTool(t, cs, "echo", map[string]any{"message": "same"}); res.IsError {
			t.Fatalf("call %d refused: %q", i+1, text(res))
		}
	}
	res := callTool(t, cs, "echo", map[string]any{"message": "same"})
	if !res.IsError || !strings.Contains(text(res), "circuit breaker") {
		t.Fatalf("21st identical call = %q, want the breaker", text(res))
	}
	if r := rec.last(); r.Rule != "guard" || r.Decision != audit.Deny {
		t.Errorf("audit = %+v", r)
	}
	if res := callTool(t, cs, "echo", map[string]any{"message": "different"}); res.IsError {
		t.Errorf("a different call after the breaker = %q", text(res))
	}
}

func TestAServerThatDiesMidCallIsAClearErrorAndIsRestarted(t *testing.T) {
	rec := &recorder{}
	p, cs := start(t, []ServerConfig{fakeConfig(t, "fake")}, Env{Audit: rec.add}, "fake", nil)
	res := callTool(t, cs, "crash", map[string]any{})
	if !res.IsError || !strings.Contains(text(res), "stopped during the call") {
		t.Fatalf("crash = %q", text(res))
	}
	res = callTool(t, cs, "echo", map[string]any{"text": "back"}) // waits for the restart
	if res.IsError || text(res) != "back" {
		t.Fatalf("after restart = %q", text(res))
	}
	u := p.servers["fake"]
	u.mu.Lock()
	starts := u.starts
	u.mu.Unlock()
	if starts != 2 {
		t.Errorf("%d starts, want 2", starts)
	}
}

func TestAServerThatNeverAnswersTimesOut(t *testing.T) {
	c := fakeConfig(t, "fake")
	c.Timeout = 500 * time.Millisecond
	rec := &recorder{}
	_, cs := start(t, []ServerConfig{c}, Env{Audit: rec.add}, "fake", nil)
	res := callTool(t, cs, "hang", map[string]any{})
	if !res.IsError || !strings.Contains(text(res), "did not answer within 500ms") {
		t.Fatalf("hang = %q", text(res))
	}
	if r := rec.last(); r.Decision != audit.Error || r.Extra["error"] != "true" || !strings.Contains(r.Extra["error_text"], "did not answer") {
		t.Errorf("audit of the timeout = %+v", r)
	}
	if res := callTool(t, cs, "echo", map[string]any{"text": "still up"}); text(res) != "still up" {
		t.Errorf("after a timeout = %q", text(res))
	}
}

func TestAnOversizedResultIsCapped(t *testing.T) {
	_, cs := start(t, []ServerConfig{fakeConfig(t, "fake")}, Env{}, "fake", nil)
	res := callTool(t, cs, "big", map[string]any{})
	if !res.IsError || !strings.Contains(text(res), "over airlock's cap of 1048576") || len(text(res)) > 1000 {
		t.Fatalf("big = %.200q", text(res))
	}
}

func TestAnUnknownServerIs404(t *testing.T) {
	p, err := New(nil, Env{Exe: "/bin/false"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rr := httptest.NewRecorder()
	p.Handler().ServeHTTP(rr, httptest.NewRequest("POST", "/mcp/nope", strings.NewReader("{}")))
	if rr.Code != 404 {
		t.Errorf("POST /mcp/nope = %d", rr.Code)
	}
}

func TestResourcesGoThroughPolicy(t *testing.T) {
	_, cs := start(t, []ServerConfig{everything(t,
		mcppolicy.Rule{Tool: "resources/read", Verdict: mcppolicy.Allow, When: []mcppolicy.Condition{{Arg: "uri", Equals: ptr("demo://resource/static/document/architecture.md")}}})},
		Env{}, "ev", nil)
	ctx := context.Background()
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://resource/static/document/architecture.md"}); err != nil {
		t.Errorf("allowed read: %v", err)
	}
	_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://resource/static/document/other.md"})
	if err == nil || !strings.Contains(err.Error(), "airlock policy refused") {
		t.Errorf("denied read: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestChildSpecGrantsExactlyTheServersOwn(t *testing.T) {
	sec, err := secrets.ParseSpec("GITHUB_TOKEN@api.github.com")
	if err != nil {
		t.Fatal(err)
	}
	s := ServerConfig{Name: "gh", Command: []string{"npx", "-y", "server-github"}, Roots: []string{"/p", "/q"}, RO: []string{"/code"},
		Hide: []string{"/p/.env"}, AllowHosts: []string{"api.github.com"}, Secrets: []secrets.Spec{sec}, Env: map[string]string{"B": "2", "A": "1"}}
	want := childspec.New("npx", "-y", "server-github")
	want.Hide = []string{"/p/.env"}
	want.Config.Workspace.Path, want.Config.RW, want.Config.RO = "/p", []string{"/q"}, []string{"/code"}
	want.Config.Network.AllowHosts, want.Config.Network.Secrets = []string{"api.github.com"}, []secrets.Spec{sec}
	want.Config.Env = []string{"A=1", "B=2"}
	if got := ChildSpec(s); !reflect.DeepEqual(got, want) {
		t.Errorf("ChildSpec = %+v\nwant %+v", got, want)
	}
}

func TestParseServers(t *testing.T) {
	good := map[string]any{
		"fs": map[string]any{"command": []any{"npx", "fs", "/p"}, "roots": []any{"/p"}, "timeout": "30s", "show_denied": true,
			"env": map[string]any{"N": 1}, "secrets": []any{"T@h"}},
		"remote": map[string]any{"url": "https://mcp.example.com/mcp", "secret": "TOKEN"},
	}
	got, err := ParseServers(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "fs" || got[0].Timeout != 30*time.Second || !got[0].ShowDenied || got[0].Env["N"] != "1" || got[1].URL == "" {
		t.Errorf("ParseServers = %+v", got)
	}
	bad := map[string]struct {
		raw  any
		want string
	}{
		"not a map":               {[]any{}, "want a map"},
		"neither command nor url": {map[string]any{"x": map[string]any{}}, "x: needs command"},
		"both":                    {map[string]any{"x": map[string]any{"command": []any{"a"}, "url": "http://h/"}}, "choose one"},
		"unknown key":             {map[string]any{"x": map[string]any{"command": []any{"a"}, "comand": 1}}, `x: unknown key "comand"`},
		"relative root":           {map[string]any{"x": map[string]any{"command": []any{"a"}, "roots": []any{"rel"}}}, "x: roots[0]: want an absolute path"},
		"bad timeout":             {map[string]any{"x": map[string]any{"command": []any{"a"}, "timeout": "soon"}}, "x: timeout:"},
		"command not a list":      {map[string]any{"x": map[string]any{"command": "a b"}}, "x: command: want a list"},
		"secret on stdio":         {map[string]any{"x": map[string]any{"command": []any{"a"}, "secret": "T"}}, "secret is for remote"},
		"bad name":                {map[string]any{"a/b": map[string]any{"command": []any{"a"}}}, "a/b: the name"},
	}
	for name, tc := range bad {
		_, err := ParseServers(tc.raw)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ParseServers error = %v, want %q", name, err, tc.want)
		}
	}
}

var _ = json.Marshal

func TestTheStdioBridgeCarriesCallsToTheProxy(t *testing.T) {
	p, err := New([]ServerConfig{everything(t, mcppolicy.Rule{Tool: "echo", Verdict: mcppolicy.Allow})}, Env{Launch: DirectLaunch, Exe: "x"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	defer func() { hs.Close(); p.Close() }()

	cr, bw := io.Pipe() // bridge → client
	br, cw := io.Pipe() // client → bridge
	done := make(chan error, 1)
	go func() { done <- Bridge(context.Background(), br, bw, hs.URL+"/mcp/ev", &http.Client{}) }()
	c := mcp.NewClient(&mcp.Implementation{Name: "stdio-client", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := callTool(t, cs, "echo", map[string]any{"message": "through the bridge"})
	if res.IsError || !strings.Contains(text(res), "through the bridge") {
		t.Errorf("echo through the bridge = %q", text(res))
	}
	res = callTool(t, cs, "get-sum", map[string]any{"a": 1, "b": 2})
	if !res.IsError || !strings.Contains(text(res), "airlock policy refused") {
		t.Errorf("a denied tool through the bridge = %q", text(res))
	}
	cs.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Bridge = %v after the client closed", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Bridge did not return after the client closed")
	}
}

func TestListChangedIsForwarded(t *testing.T) {
	changed := make(chan struct{}, 10)
	copts := &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} }}
	_, cs := start(t, []ServerConfig{fakeConfig(t, "fake")}, Env{}, "fake", copts)
	callTool(t, cs, "echo", map[string]any{}) // the server is up: a notice of its start is no longer due
	time.Sleep(300 * time.Millisecond)
	for len(changed) > 0 {
		<-changed
	}
	callTool(t, cs, "grow", map[string]any{})
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no tools/list_changed reached the client")
	}
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tl := range res.Tools {
		found = found || tl.Name == "grown"
	}
	if !found {
		t.Errorf("tools/list after the change lacks the new tool")
	}
}

func TestARemoteServerGetsTheSecretAsABearerToken(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, r *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	var auth atomic.Value
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(remote.Close) // after the proxy (registered later) has closed its session
	t.Setenv("MCPPROXY_TEST_TOKEN", "s3cret-value")
	cfg := ServerConfig{Name: "remote", URL: remote.URL, Secret: "MCPPROXY_TEST_TOKEN",
		Rules: []mcppolicy.Rule{{Tool: "echo", Verdict: mcppolicy.Allow}}}
	_, cs := start(t, []ServerConfig{cfg}, Env{}, "remote", nil)
	if res := callTool(t, cs, "echo", map[string]any{"text": "far"}); text(res) != "far" {
		t.Fatalf("remote echo = %q", text(res))
	}
	if got, _ := auth.Load().(string); got != "Bearer s3cret-value" {
		t.Errorf("Authorization at the remote server = %q", got)
	}
}

// TestTheREADMEExampleAllowsWhatItSaysItAllows parses the mcp_servers
// example in the README as a user would paste it: a read within the roots
// is allowed, a write escalates, a read of the denied path and a tool no
// rule names are denied.
func TestTheREADMEExampleAllowsWhatItSaysItAllows(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\nmcp_servers:\n")
	if !ok {
		t.Fatal("README: no ```yaml block starting with mcp_servers:")
	}
	block, _, _ := strings.Cut(rest, "```")
	var raw map[string]any
	if err := yaml.Unmarshal([]byte("mcp_servers:\n"+block), &raw); err != nil {
		t.Fatalf("README example: %v", err)
	}
	servers, err := ParseServers(raw["mcp_servers"])
	if err != nil {
		t.Fatalf("README example: ParseServers: %v", err)
	}
	var fs ServerConfig
	for _, s := range servers {
		if s.Name == "fs" {
			fs = s
		}
	}
	if len(fs.Roots) == 0 {
		t.Fatalf("README example: no fs server with roots in %+v", servers)
	}
	root := fs.Roots[0]
	pol, err := mcppolicy.New(mcppolicy.Config{Rules: fs.Rules, Roots: fs.Roots, Unknown: mcppolicy.Deny})
	if err != nil {
		t.Fatalf("README example: policy: %v", err)
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
		want mcppolicy.Verdict
	}{
		{"read_text_file", map[string]any{"path": root + "/src/main.go"}, mcppolicy.Allow},
		{"read_multiple_files", map[string]any{"path": root + "/a"}, mcppolicy.Allow},
		{"write_file", map[string]any{"path": root + "/notes.md", "content": "x"}, mcppolicy.Escalate},
		{"read_text_file", map[string]any{"path": "/etc/passwd"}, mcppolicy.Deny},
		{"read_text_file", map[string]any{"path": root + "/.env"}, mcppolicy.Deny},
		{"delete_everything", map[string]any{}, mcppolicy.Deny},
	} {
		if d := pol.Decide(tc.tool, tc.args); d.Verdict != tc.want {
			t.Errorf("README example: Decide(%s, %v) = %v, want %v", tc.tool, tc.args, d, tc.want)
		}
	}
	if got := hidden(fs, nil); !slices.Contains(got, root+"/.env") {
		t.Errorf("README example: the fs server's sandbox hides %q, want the denied %s/.env among them", got, root)
	}
}

func TestAServerSandboxHidesProtectedAndDeniedPaths(t *testing.T) {
	within := func(p ...string) []mcppolicy.Condition {
		return []mcppolicy.Condition{{Arg: "path", PathWithin: p}}
	}
	s := ServerConfig{Name: "fs", Command: []string{"srv"}, Roots: []string{"/p", "/q"}, Rules: []mcppolicy.Rule{
		{Tool: "read_text_file", Verdict: mcppolicy.Allow, When: within(mcppolicy.RootsToken)},
		{Tool: "write_file", Verdict: mcppolicy.Escalate, When: within(mcppolicy.RootsToken)},
		{Tool: "*", Verdict: mcppolicy.Deny, When: within("/p/secret", mcppolicy.RootsToken)},
		{Tool: "**", Verdict: mcppolicy.Deny, When: within("/q/keys/")},
		{Tool: "read_*", Verdict: mcppolicy.Deny, When: within("/p/both")},
		{Tool: "write_file", Verdict: mcppolicy.Deny, When: within("/p/both", "/p/ro")},
		{Tool: "*", Verdict: mcppolicy.Deny, When: []mcppolicy.Condition{{Arg: "path", PathWithin: []string{"/p/maybe"}, Glob: "*.txt"}}},
		{Tool: "*", Verdict: mcppolicy.Deny, When: within("/etc", "/pq")},
	}}
	got := hidden(s, []string{"/state/airlock", "/home/me/.config/airlock", "/state/airlock", "/"})
	want := []string{"/state/airlock", "/home/me/.config/airlock", "/p/secret", "/q/keys", "/p/both"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("hidden = %q, want %q: protected paths and the paths denied to every allowed tool (/p/ro stays: reads may use it; /p/maybe: only some names; /etc and /pq: outside the roots; none holding a root)", got, want)
	}
	s.Hide = got
	if cs := ChildSpec(s); !reflect.DeepEqual(cs.Hide, want) {
		t.Errorf("ChildSpec(s).Hide = %q, want every hidden path, %q", cs.Hide, want)
	}
}

// TestArgumentsAServerCouldDecodeOtherwiseAreRefused sends the real
// filesystem server's read and write tools arguments whose bytes decode
// differently by decoder (lone surrogates, invalid UTF-8, NUL, a duplicate
// key) and paths that play with `..`, symlinks, case and Unicode forms. The
// judge is the host: the canary outside the root is never in a result and
// nothing is written outside the root; each refusal is audited, and the
// same calls with plain arguments work.
func TestArgumentsAServerCouldDecodeOtherwiseAreRefused(t *testing.T) {
	T, _ := filepath.EvalSymlinks(t.TempDir())
	root, outside := filepath.Join(T, "root"), filepath.Join(T, "outside")
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	os.MkdirAll(outside, 0o755)
	const canary = "CANARY-outside-the-root"
	os.WriteFile(filepath.Join(outside, "canary.txt"), []byte(canary), 0o644)
	os.WriteFile(filepath.Join(root, "ok.txt"), []byte("inside the root"), 0o644)
	os.Symlink(outside, filepath.Join(root, "link-out"))
	os.Symlink(outside, filepath.Join(root, "\u00e9-link")) // NFC é
	rec := &recorder{}
	p, _ := start(t, []ServerConfig{fsConfig(t, root)}, Env{Sandbox: "sb", Audit: rec.add}, "fs", nil)
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	raw := rawSession(t, hs.URL+"/mcp/fs")

	refused := map[string]string{
		"a lone surrogate":              `{"path":"` + root + `/\ud800/../../outside/canary.txt"}`,
		"a lone low surrogate":          `{"path":"` + root + `/ok\udfff.txt"}`,
		"invalid UTF-8":                 "{\"path\":\"" + root + "/\xe2\x82/../../outside/canary.txt\"}",
		"an overlong slash":             "{\"path\":\"" + root + "/..\xc0\xaf..\xc0\xafoutside/canary.txt\"}",
		"an escaped NUL":                `{"path":"` + root + `/ok.txt\u0000/../../outside/canary.txt"}`,
		"the path twice":                `{"path":"` + root + `/ok.txt","path":"` + outside + `/canary.txt"}`,
		"an oversized argument":         `{"path":"` + root + `/ok.txt","pad":"` + strings.Repeat("A", mcppolicy.MaxArgs) + `"}`,
		"a write with a lone surrogate": `{"path":"` + root + `/\udbff/../../outside/new.txt","content":"pwned"}`,
	}
	for name, args := range refused {
		tool := "read_text_file"
		if strings.HasPrefix(name, "a write") {
			tool = "write_file"
		}
		got := raw(tool, args)
		if strings.Contains(got, canary) || !strings.Contains(got, "airlock policy refused") || !strings.Contains(got, "rule arguments") {
			t.Errorf("%s: %s = %.300s, want a refusal naming the arguments", name, tool, got)
		}
		if r := rec.last(); r.Decision != audit.Deny || r.Rule != "arguments" || r.Subject != "fs/"+tool {
			t.Errorf("%s: audit = %+v, want a deny by rule arguments", name, r)
		}
	}
	// Paths that decode one way: the policy resolves them as the server does.
	denied := map[string]string{
		"dot-dot out of the root":        root + "/sub/../../outside/canary.txt",
		"a symlink out of the root":      root + "/link-out/canary.txt",
		"a file URL out of the root":     "file://" + outside + "/canary.txt",
		"a relative escape":              "../outside/canary.txt",
		"a fullwidth solidus":            root + "／..／..／outside／canary.txt",
		"the root in capitals":           strings.ToUpper(T) + "/root/../outside/canary.txt",
		"an NFD spelling of an NFC link": root + "/e\u0301-link/canary.txt",
		"a fullwidth spelling of a link": root + "/ｌｉｎｋ-ｏｕｔ/canary.txt",
	}
	for name, path := range denied {
		a, _ := json.Marshal(map[string]any{"path": path})
		if got := raw("read_text_file", string(a)); strings.Contains(got, canary) {
			t.Errorf("%s: read %q got the canary: %.300s", name, path, got)
		}
	}
	a, _ := json.Marshal(map[string]any{"path": root + "/link-out/new.txt", "content": "pwned"})
	raw("write_file", string(a))
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("outside the root after the writes: %d entries, want only the canary", len(ents))
	}
	// Positive controls: the same tool with plain arguments, a surrogate pair, non-ASCII names.
	if got := raw("read_text_file", `{"path":"`+root+`/ok.txt"}`); !strings.Contains(got, "inside the root") {
		t.Errorf("a plain read in the root = %.300s", got)
	}
	os.WriteFile(filepath.Join(root, "😀é.txt"), []byte("emoji inside"), 0o644)
	if got := raw("read_text_file", `{"path":"`+root+`/\ud83d\ude00\u00e9.txt"}`); !strings.Contains(got, "emoji inside") {
		t.Errorf("a read by surrogate-pair escapes = %.300s", got)
	}
	if got := raw("write_file", `{"path":"`+root+`/new-ｆｕｌｌ.txt","content":"written"}`); strings.Contains(got, "refused") {
		t.Errorf("a write of a fullwidth name in the root = %.300s", got)
	}
	if b, err := os.ReadFile(filepath.Join(root, "new-ｆｕｌｌ.txt")); string(b) != "written" {
		t.Errorf("the fullwidth file: %q, %v", b, err)
	}
}

// rawSession initializes a Streamable HTTP session by hand and returns a
// function that sends tools/call with args as raw bytes (the SDK's client
// would re-encode them) and returns the response body.
func rawSession(t *testing.T, url string) func(tool, args string) string {
	t.Helper()
	hc := &http.Client{Timeout: time.Minute}
	var sid string
	post := func(body string) string {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", url, err)
		}
		defer resp.Body.Close()
		if s := resp.Header.Get("Mcp-Session-Id"); s != "" {
			sid = s
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		return string(b)
	}
	if got := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`); !strings.Contains(got, "serverInfo") {
		t.Fatalf("initialize = %.300s", got)
	}
	post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	id := 1
	return func(tool, args string) string {
		id++
		return post(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, tool, args))
	}
}

func TestARootHoldingAirlocksOwnDirsIsRefusedAtStart(t *testing.T) {
	home := t.TempDir()
	s := ServerConfig{Name: "fs", Command: []string{"srv"}, Roots: []string{home}}
	_, err := New([]ServerConfig{s}, Env{Exe: "/bin/false", Launch: DirectLaunch, Protected: []string{home + "/.config/airlock"}})
	if err == nil || !strings.Contains(err.Error(), "holds airlock's own") {
		t.Fatalf("New with a root holding the config dir = %v, want a refusal naming it", err)
	}
	p, err := New([]ServerConfig{s}, Env{Exe: "/bin/false", Launch: DirectLaunch, Protected: []string{t.TempDir()}})
	if err != nil {
		t.Fatalf("the control, protected dirs elsewhere: %v", err)
	}
	p.Close()
}

// A human approves what they are shown: arguments longer than the audit
// log keeps reach the asker whole, with the part that matters at the end.
func TestAnEscalationShowsTheWholeArguments(t *testing.T) {
	var asked []approval.Request
	var mu sync.Mutex
	ask := func(ctx context.Context, r approval.Request) approval.Decision {
		mu.Lock()
		asked = append(asked, r)
		mu.Unlock()
		return approval.Decision{Allow: false, By: "test"}
	}
	_, cs := start(t, []ServerConfig{everything(t, mcppolicy.Rule{Tool: "echo", Verdict: mcppolicy.Escalate, Name: "ask-echo"})},
		Env{Ask: ask, ProgressEvery: time.Second}, "ev", nil)
	long := strings.Repeat("x", 3*maxDetail) + " --and-then-the-part-that-matters"
	callTool(t, cs, "echo", map[string]any{"message": long})
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 || !strings.Contains(asked[0].Detail, long) {
		t.Fatalf("asked %d requests; the detail holds the whole argument: %v", len(asked), len(asked) == 1 && strings.Contains(asked[0].Detail, long))
	}
}
