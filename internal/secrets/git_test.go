package secrets

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestTheGitOptionMarksAGitSecret(t *testing.T) {
	for name, c := range map[string]struct {
		flag, user, err string
	}{
		"git uses GitHub's token user":       {"TOKEN@github.com:git", DefaultGitUser, ""},
		"git=USER names another":             {"TOKEN@gitlab.com:git=oauth2", "oauth2", ""},
		"git goes with the other options":    {"TOKEN@github.com:body:git", DefaultGitUser, ""},
		"no git option is no git secret":     {"TOKEN@github.com", "", ""},
		"an empty user is refused":           {"TOKEN@github.com:git=", "", "the user after :git="},
		"a user with a semicolon is refused": {"TOKEN@github.com:git=a;b", "", "the user after :git="},
		"a user with shell text is refused":  {"TOKEN@github.com:git=$(id)", "", "the user after :git="},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := ParseFlag(c.flag, fakeSources(t))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("ParseFlag(%q) = %v, want %q", c.flag, err, c.err)
				}
				return
			}
			if err != nil || s.Git != c.user {
				t.Fatalf("ParseFlag(%q) = %v, %v; want Git %q", c.flag, s, err, c.user)
			}
		})
	}
}

// gitEnv is pairs as git's environment config, for a real git.
func gitEnv(pairs [][2]string) []string {
	env := []string{"GIT_CONFIG_NOSYSTEM=1", "HOME=/nonexistent", "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_COUNT=" + strconv.Itoa(len(pairs))}
	for i, p := range pairs {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, p[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, p[1]))
	}
	return append(env, "PATH="+os.Getenv("PATH"))
}

// A real git, given only the environment config, answers the placeholder for
// the secret's hosts and nothing for any other, after dropping a helper set
// before; and rewrites ssh remotes of the host to HTTPS.
func TestGitConfigGivesRealGitThePlaceholderForTheSecretsHostsOnly(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	gh, _ := ParseFlag("TOKEN@github.com,*.ghe.example.com:git", fakeSources(t))
	plain, _ := ParseFlag("OTHER@api.example.com", fakeSources(t))
	set, err := NewSet(gh, plain)
	if err != nil {
		t.Fatal(err)
	}
	pairs := set.GitConfig()
	// A helper the user configured earlier would answer otherwise.
	pairs = append([][2]string{{"credential.helper", "!f() { echo username=u; echo password=from-an-earlier-helper; }; f"}}, pairs...)
	for _, p := range pairs {
		if strings.Contains(p[1], "tok-REAL") || strings.Contains(p[0], "OTHER") {
			t.Fatalf("GitConfig holds a value or a non-git secret: %q", p)
		}
	}
	fill := func(host string) string {
		c := exec.Command("git", "credential", "fill")
		c.Env = gitEnv(pairs)
		c.Stdin = strings.NewReader("protocol=https\nhost=" + host + "\n\n")
		var out bytes.Buffer
		c.Stdout = &out
		c.Run()
		return out.String()
	}
	for host, want := range map[string]string{
		"github.com":          "username=x-access-token\npassword=" + gh.Placeholder + "\n",
		"a.ghe.example.com":   "password=" + gh.Placeholder + "\n",
		"evil.com":            "password=from-an-earlier-helper\n",
		"github.com.evil.com": "password=from-an-earlier-helper\n",
		"api.example.com":     "password=from-an-earlier-helper\n",
	} {
		if got := fill(host); !strings.Contains(got, want) {
			t.Errorf("git credential fill for %s = %q, want %q", host, got, want)
		}
	}
	repo := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	for remote, want := range map[string]string{
		"git@github.com:org/r.git":       "https://github.com/org/r.git",
		"ssh://git@github.com/org/r.git": "https://github.com/org/r.git",
		"git@gitlab.com:org/r.git":       "git@gitlab.com:org/r.git",
		"git@github.com.evil.com:org/r":  "git@github.com.evil.com:org/r",
	} {
		c := exec.Command("git", "-C", repo, "ls-remote", "--get-url", remote)
		c.Env = gitEnv(pairs)
		out, err := c.Output()
		if got := strings.TrimSpace(string(out)); err != nil || got != want {
			t.Errorf("git ls-remote --get-url %s = %q (%v), want %q", remote, got, err, want)
		}
	}
}

func TestParseAppSourceReadsEachKeyOnce(t *testing.T) {
	a, err := ParseAppSource("app=1;installation=2;key=/k.pem;repos=org/a,b;permissions=contents:write,metadata:read;api=https://ghe.example.com/api/v3")
	if err != nil {
		t.Fatal(err)
	}
	if a.AppID != "1" || a.InstallationID != "2" || a.Key != "/k.pem" || strings.Join(a.Repos, " ") != "org/a b" ||
		a.Permissions["contents"] != "write" || a.Permissions["metadata"] != "read" || a.API != "https://ghe.example.com/api/v3" {
		t.Errorf("ParseAppSource = %+v", a)
	}
	for name, c := range map[string]struct{ text, want string }{
		"a missing key file":          {"app=1;installation=2;repos=a", "no key="},
		"no repositories":             {"app=1;installation=2;key=/k", "no repos="},
		"an unknown key":              {"app=1;installation=2;key=/k;repos=a;secret=x", `unknown key "secret"`},
		"a key given twice":           {"app=1;app=2;installation=2;key=/k;repos=a", "app= given twice"},
		"an empty repository":         {"app=1;installation=2;key=/k;repos=a,,b", "empty name"},
		"a permission without access": {"app=1;installation=2;key=/k;repos=a;permissions=contents", "NAME:ACCESS"},
		"text that is not KEY=VALUE":  {"app=1;installation", "not KEY=VALUE"},
	} {
		if _, err := ParseAppSource(c.text); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ParseAppSource(%q) = %v, want %q", name, c.text, err, c.want)
		}
	}
}

func FuzzParseAppSource(f *testing.F) {
	f.Add("app=1;installation=2;key=/k.pem;repos=a,b;permissions=contents:write;api=https://x")
	f.Add("app=;;=")
	f.Add("permissions=a:b:c,d:e")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAppSource(s)
		if err == nil && (a.AppID == "" || a.Key == "" || len(a.Repos) == 0) {
			t.Fatalf("ParseAppSource(%q) accepted a source without app, key or repos: %+v", s, a)
		}
	})
}

func TestAGitHubAppSourceMakesARotatingSecretItsKeeperRefreshes(t *testing.T) {
	src := fakeSources(t)
	var got AppSource
	var rot atomic.Pointer[Rotator]
	src.GitHubApp = func(name string, a AppSource) ([]byte, func(*Rotator), error) {
		got = a
		return []byte("ghs_FIRST-REAL-token"), func(r *Rotator) { rot.Store(r) }, nil
	}
	s, err := ParseFlag("GH=github-app:app=1;installation=2;key=/k.pem;repos=demo@github.com:git", src)
	if err != nil {
		t.Fatal(err)
	}
	if got.AppID != "1" || s.Git != DefaultGitUser || rot.Load() == nil {
		t.Fatalf("source %+v, secret %v, keeper given a rotator: %v", got, s, rot.Load() != nil)
	}
	set, _ := NewSet(s)
	auth := func() string {
		v, _, err := set.SwapHeader("github.com", "Bearer "+s.Placeholder)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if auth() != "Bearer ghs_FIRST-REAL-token" {
		t.Fatalf("the first token is not swapped in")
	}
	if err := rot.Load().Rotate([]byte("ghs_SECOND-REAL-token")); err != nil {
		t.Fatal(err)
	}
	// The Set made before the refresh swaps in the new token: a running
	// gateway needs no restart.
	if auth() != "Bearer ghs_SECOND-REAL-token" {
		t.Errorf("after a refresh the gateway should swap in the new token")
	}
	src.GitHubApp = func(string, AppSource) ([]byte, func(*Rotator), error) {
		return nil, nil, fmt.Errorf("token endpoint answered 401")
	}
	_, err = ParseFlag("GH=github-app:app=1;installation=2;key=/k.pem;repos=demo@github.com:git", src)
	if err == nil || !strings.Contains(err.Error(), "--secret GH: github-app: token endpoint answered 401") {
		t.Errorf("a failing minter: %v", err)
	}
}

func TestCommandSourcesAreBoundedInTimeAndOutput(t *testing.T) {
	start := time.Now()
	if _, err := runBounded("exec sleep 30", 300*time.Millisecond, 1024); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("a slow command: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("the slow command was not stopped at its timeout")
	}
	// A child keeping stdout open does not hold the caller past the timeout either.
	start = time.Now()
	runBounded("(sleep 30 2>/dev/null &) ; echo tok-REAL-x", 300*time.Millisecond, 1024)
	if time.Since(start) > 10*time.Second {
		t.Errorf("a background child holding stdout held the caller")
	}
	if _, err := runBounded("head -c 5000 /dev/zero", time.Minute, 1024); err == nil || !strings.Contains(err.Error(), "more than 1 KiB") {
		t.Errorf("a long output: %v", err)
	}
	dir := t.TempDir()
	marker := filepath.Join(dir, "m")
	out, err := runBounded("echo tok-REAL-ok; touch "+marker, time.Minute, 1024)
	if err != nil || string(out) != "tok-REAL-ok\n" {
		t.Errorf("a good command: %q, %v", out, err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the good command did not run: %v", err)
	}
}

func TestNewSetRefusesAGitUserThatIsNotPlainText(t *testing.T) {
	s, err := New("TOKEN", []byte("tok-REAL-1234567890"), []string{"github.com"})
	if err != nil {
		t.Fatal(err)
	}
	s.Git = "x; touch /tmp/pwned"
	if _, err := NewSet(s); err == nil || !strings.Contains(err.Error(), "git user") {
		t.Errorf("NewSet with a shell command as git user = %v, want refused", err)
	}
	s.Git = "oauth2"
	if _, err := NewSet(s); err != nil {
		t.Errorf("NewSet with git user oauth2: %v", err)
	}
}
