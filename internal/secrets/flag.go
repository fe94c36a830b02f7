package secrets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/regfile"
)

// FlagSyntax is the --secret syntax, for help text and error messages.
const FlagSyntax = `NAME[=SOURCE]@HOST[,HOST...][:body][:prefix=TEXT][:git[=USER]]`

// FlagHelp explains FlagSyntax.
const FlagHelp = `--secret ` + FlagSyntax + `
  NAME          env var the sandbox sees, holding a placeholder, never the value
  SOURCE        where the real value comes from on the host:
                  (none)        env var NAME
                  env:VAR       env var VAR
                  file:PATH     a file (~/ expands; trailing newlines dropped)
                  cmd:COMMAND   stdout of sh -c COMMAND (trailing newlines dropped;
                                at most 2 minutes and 64 KiB)
                  github-app:app=ID;installation=ID;key=PATH;repos=NAME,...
                               [;permissions=NAME:read|write,...][;api=URL]
                                a GitHub App installation token minted on the
                                host, limited to repos, refreshed before it lapses
  HOST          a name, *.name (the name and one more label) or an IP address
                ([::1] for IPv6); no ports
  :body         also swap the placeholder in request bodies, not only headers and URL
  :prefix=TEXT  start the placeholder with TEXT, for clients that check a key's
                format (e.g. :prefix=sk-ant-api03-); letters, digits, - . _ ~
  :git[=USER]   git over HTTPS to HOST uses it: a credential helper in git's
                environment config answers USER (default x-access-token) and the
                placeholder, and ssh remotes git@HOST: are fetched over HTTPS
Examples: GITHUB_TOKEN@api.github.com
          GH_TOKEN=cmd:gh auth token@github.com,api.github.com:git
          OPENAI_API_KEY=cmd:pass show openai@api.openai.com:body
          AWS_KEY=file:~/.aws/key@*.amazonaws.com`

// Sources is where ParseFlag reads real values from. Tests inject fakes so they need no
// real secret; production passes DefaultSources.
type Sources struct {
	LookupEnv func(name string) (string, bool)
	ReadFile  func(path string) ([]byte, error)
	// RunCmd runs command with sh -c and returns its standard output.
	RunCmd func(command string) ([]byte, error)
	// GitHubApp mints a first installation token for secret name and returns
	// it with keep, which ParseFlag calls with the secret's Rotator so that
	// later tokens replace it (nil: the source is refused).
	GitHubApp func(name string, app AppSource) (first []byte, keep func(*Rotator), err error)
}

const (
	// cmdTimeout bounds a cmd: source; a password manager may wait for its
	// passphrase, so it is not short.
	cmdTimeout = 2 * time.Minute
)

// DefaultSources reads the process environment, the file system and sh -c. Commands get
// no standard input (so they cannot eat the terminal's) and share the terminal's
// standard error, so a password manager's messages reach the user; output is never
// quoted in errors.
func DefaultSources() Sources {
	return Sources{
		LookupEnv: os.LookupEnv,
		ReadFile: func(path string) ([]byte, error) {
			// The shell does not expand ~ inside NAME=file:~/x, so do it here.
			if rest, ok := strings.CutPrefix(path, "~/"); ok {
				home, err := os.UserHomeDir()
				if err != nil {
					return nil, fmt.Errorf("expanding ~: %w", err)
				}
				path = filepath.Join(home, rest)
			}
			return readValueFile(path)
		},
		RunCmd: func(command string) ([]byte, error) {
			return runBounded(command, cmdTimeout, maxValueLen)
		},
	}
}

// readValueFile reads a secret's file: links are followed (mounted secrets
// are links), but only a regular file is read, and opening it never
// blocks: a FIFO put where the file is looked for must not hang the start.
func readValueFile(path string) ([]byte, error) {
	return regfile.Read(path, 1<<20, true) // a mounted secret is a link
}

// Spec is one --secret flag parsed, its value not yet read: the name the
// sandbox sees, where the value comes from, the hosts it may go to and the
// options. A flag is parsed once (ParseSpec) and read once (Open); String
// gives the flag back for the state dir and the config files.
type Spec struct {
	Name string
	// Kind is the value's source: "env" (Arg is the variable; the flag
	// wrote none when Arg is Name and Explicit is false), "file", "cmd" or
	// "github-app" (App holds it parsed; Arg its text).
	Kind, Arg string
	Explicit  bool // the flag wrote NAME=SOURCE, not NAME alone
	App       AppSource
	Hosts     []string // normalized
	InBody    bool
	Prefix    string
	Git       string // the git user, "" without :git
}

// EnvSpec is the secret NAME whose value is host env var src, sent to hosts:
// what an agent's key makes without formatting a flag.
func EnvSpec(name, src string, hosts []string, prefix string) (Spec, error) {
	var opts []string
	if prefix != "" {
		opts = []string{"prefix=" + prefix}
	}
	return specOf(name, "env:"+src, true, hosts, opts, "--secret "+name+": ")
}

// ParseFlag parses one --secret flag (see FlagSyntax and FlagHelp) and reads the value.
//
// Hosts and options follow the last '@', which cannot occur in them, so a file path or
// command may contain '@'. The syntax takes no literal value: a value on the command
// line would be in shell history and ps. Everything is checked before the value is
// read, so a mistyped host never runs the command. Errors name the secret (or the flag,
// when the name itself is bad) but never quote the source text or the value.
func ParseFlag(flag string, src Sources) (*Secret, error) {
	sp, err := ParseSpec(flag)
	if err != nil {
		return nil, err
	}
	return sp.Open(src)
}

// ParseSpec parses one --secret flag without reading its value; its errors
// are ParseFlag's.
func ParseSpec(flag string) (Spec, error) {
	at := strings.LastIndexByte(flag, '@')
	if at < 0 {
		return Spec{}, fmt.Errorf(`--secret: missing "@HOST"; write %s, e.g. GITHUB_TOKEN@api.github.com`, FlagSyntax)
	}
	head, tail := flag[:at], flag[at+1:]
	name, source, hasSource := strings.Cut(head, "=")
	if err := checkName(name); err != nil {
		// The text is not quoted: someone who typed a literal value here would see it
		// echoed into logs.
		if name == "" {
			return Spec{}, fmt.Errorf("--secret: no NAME before '@' or '='; write %s", FlagSyntax)
		}
		return Spec{}, fmt.Errorf("--secret: the text before '@' or '=' is %w; write %s", err, FlagSyntax)
	}
	if strings.Contains(tail, "://") {
		return Spec{}, fmt.Errorf("--secret %s: a URL after '@'; write the host alone, e.g. %s@api.example.com", name, name)
	}
	hostList, opts := cutOptions(tail)
	if slices.Contains(opts, "") {
		return Spec{}, fmt.Errorf("--secret %s: an empty option after ':'; write IPv6 addresses in brackets, as in [::1]", name)
	}
	if hostList == "" {
		return Spec{}, fmt.Errorf(`--secret %s: no hosts after '@'; name the hosts the value may go to, e.g. %s@api.example.com`, name, name)
	}
	return specOf(name, source, hasSource, strings.Split(hostList, ","), opts, "--secret "+name+": ")
}

// specOf checks a secret's parts; errors start with pre.
func specOf(name, source string, hasSource bool, hostList, opts []string, pre string) (Spec, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s"+format, append([]any{pre}, args...)...)
	}
	if err := checkName(name); err != nil {
		return Spec{}, fail("%w", err)
	}
	hosts, err := normalizeHosts(hostList)
	if err != nil {
		return Spec{}, fail("%w", err)
	}
	sp := Spec{Name: name, Hosts: hosts, Explicit: hasSource}
	for _, o := range opts {
		switch p, isPrefix := strings.CutPrefix(o, "prefix="); {
		case o == "body":
			sp.InBody = true
		case o == "git":
			sp.Git = DefaultGitUser
		case strings.HasPrefix(o, "git="):
			if sp.Git = o[len("git="):]; !validGitUser(sp.Git) {
				return Spec{}, fail("the user after :git= may hold only letters, digits and - . _")
			}
		case isPrefix:
			if err := checkPrefix(p); err != nil {
				return Spec{}, fail("%w", err)
			}
			if p == "" {
				return Spec{}, fail("empty :prefix=")
			}
			sp.Prefix = p
		case o != "" && strings.Trim(o, "0123456789") == "":
			return Spec{}, fail("secrets are bound to hosts, not ports; drop :%s", o)
		default:
			return Spec{}, fail("unknown option %q after the hosts; options are :body, :prefix=TEXT and :git[=USER]", o)
		}
	}
	if app, ok := strings.CutPrefix(source, "github-app:"); ok && hasSource {
		if sp.App, err = ParseAppSource(app); err != nil {
			return Spec{}, fail("github-app: %w", err)
		}
		sp.Kind, sp.Arg = "github-app", app
		return sp, nil
	}
	if sp.Kind, sp.Arg, err = checkSource(name, source, hasSource); err != nil {
		return Spec{}, fail("%w", err)
	}
	return sp, nil
}

// String is the spec in --secret form; ParseSpec gives it back.
func (sp Spec) String() string {
	var b strings.Builder
	b.WriteString(sp.Name)
	if sp.Explicit {
		b.WriteString("=" + sp.Kind + ":" + sp.Arg)
	}
	for i, h := range sp.Hosts {
		b.WriteString([]string{"@", ","}[min(i, 1)])
		if strings.Contains(h, ":") {
			h = "[" + h + "]" // IPv6: its colons are not options
		}
		b.WriteString(h)
	}
	if sp.InBody {
		b.WriteString(":body")
	}
	if sp.Prefix != "" {
		b.WriteString(":prefix=" + sp.Prefix)
	}
	switch sp.Git {
	case "":
	case DefaultGitUser:
		b.WriteString(":git")
	default:
		b.WriteString(":git=" + sp.Git)
	}
	return b.String()
}

// Open reads the spec's value from src and makes the secret (for a
// github-app source, mints its first token). Errors name the secret, never
// the value.
func (sp Spec) Open(src Sources) (*Secret, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("--secret %s: "+format, append([]any{sp.Name}, args...)...)
	}
	if sp.Kind == "github-app" {
		s, err := appSecret(sp.Name, sp.App, sp.Hosts, sp.Prefix, src)
		if err != nil {
			return nil, fail("%w", err)
		}
		s.InBody, s.Git = sp.InBody, sp.Git
		return s, nil
	}
	value, from, err := readValue(sp.Name, sp.Kind, sp.Arg, src)
	if err != nil {
		return nil, fail("%w", err)
	}
	s, err := newSecret(sp.Name, value, sp.Hosts, sp.Prefix)
	if err != nil {
		return nil, fmt.Errorf("--secret %s: from %s: %w", sp.Name, from, errors.Unwrap(err))
	}
	s.InBody, s.Git = sp.InBody, sp.Git
	return s, nil
}

// appSecret mints the first token of a github-app: source and makes a
// rotating secret that the source's keeper refreshes.
func appSecret(name string, app AppSource, hosts []string, prefix string, src Sources) (*Secret, error) {
	if src.GitHubApp == nil {
		return nil, errors.New("github-app: no way to mint App tokens here (Sources.GitHubApp is nil)")
	}
	first, keep, err := src.GitHubApp(name, app)
	if err != nil {
		return nil, fmt.Errorf("github-app: %w", err)
	}
	s, rot, err := NewRotating(name, first, hosts, prefix)
	if err != nil {
		return nil, fmt.Errorf("from github-app: %w", errors.Unwrap(err))
	}
	if keep != nil {
		keep(rot)
	}
	return s, nil
}

// runBounded runs command with sh -c: no standard input (so it cannot eat
// the terminal's), the terminal's standard error (a password manager's
// messages reach the user), at most timeout, and at most limit bytes of
// output. Output is never quoted in errors.
func runBounded(command string, timeout time.Duration, limit int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	c.Stderr = os.Stderr
	c.WaitDelay = time.Second // a child holding stdout open does not hold us
	out := &capped{limit: limit}
	c.Stdout = out
	err := c.Run()
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("the command ran longer than %v", timeout)
	case out.over:
		return nil, fmt.Errorf("the command printed more than %d KiB", limit>>10)
	case err != nil:
		return nil, err
	}
	return out.b, nil
}

// capped keeps the first limit bytes written and notes any more.
type capped struct {
	b     []byte
	limit int
	over  bool
}

func (c *capped) Write(p []byte) (int, error) {
	if len(c.b)+len(p) > c.limit {
		c.over = true
		return 0, errors.New("output too long")
	}
	c.b = append(c.b, p...)
	return len(p), nil
}

// DefaultGitUser is the user name git sends with a :git secret's
// placeholder: GitHub's for tokens (App installation tokens need it; personal
// ones take any name).
const DefaultGitUser = "x-access-token"

func validGitUser(u string) bool {
	if u == "" || len(u) > 64 {
		return false
	}
	for i := 0; i < len(u); i++ {
		if c := u[i]; !(unreserved(c) && c != '~') {
			return false
		}
	}
	return true
}

// cutOptions splits "HOSTS[:OPT]..." at the colons outside [IPv6] brackets.
func cutOptions(s string) (string, []string) {
	depth, start := 0, 0
	var parts []string
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ':':
			if depth <= 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	parts = append(parts, s[start:])
	return parts[0], parts[1:]
}

// checkSource checks a secret's source text (after NAME=, when hasSource)
// and returns its kind and argument.
func checkSource(name, source string, hasSource bool) (kind, arg string, err error) {
	kind, arg = "env", name
	if hasSource {
		var ok bool
		if kind, arg, ok = strings.Cut(source, ":"); !ok || (kind != "env" && kind != "file" && kind != "cmd") {
			return "", "", fmt.Errorf("the source after '=' must be env:VAR, file:PATH, cmd:COMMAND or github-app:...; "+
				"a literal value is not accepted, as it would stay in shell history and ps (to use env var %s, write %s@HOSTS)", name, name)
		}
		if arg == "" {
			return "", "", fmt.Errorf("empty %s: source", kind)
		}
	}
	if kind == "env" {
		if err := checkName(arg); err != nil {
			return "", "", fmt.Errorf("env: %w", err)
		}
	}
	return kind, arg, nil
}

// readValue resolves a checked source (see checkSource); from describes it
// for errors ("env FOO", "file:PATH", "cmd") without any of the value.
func readValue(name, kind, arg string, src Sources) (value []byte, from string, err error) {
	switch kind {
	case "env":
		from = "env var " + arg
		if src.LookupEnv == nil {
			return nil, from, errors.New("no environment to read (Sources.LookupEnv is nil)")
		}
		v, ok := src.LookupEnv(arg)
		if !ok {
			return nil, from, fmt.Errorf("%s is not set on the host; export it, or use %s=file:PATH@HOSTS or %s=cmd:COMMAND@HOSTS", from, name, name)
		}
		value = []byte(v)
	case "file":
		from = "file:" + arg
		if src.ReadFile == nil {
			return nil, from, errors.New("no file system to read (Sources.ReadFile is nil)")
		}
		if value, err = src.ReadFile(arg); err != nil {
			return nil, from, fmt.Errorf("reading the file: %w", err)
		}
		value = bytes.TrimRight(value, "\r\n")
	case "cmd":
		// The command text is not repeated: it may carry a vault path the user would
		// rather not see in logs.
		from = "cmd"
		if src.RunCmd == nil {
			return nil, from, errors.New("no way to run commands (Sources.RunCmd is nil)")
		}
		if value, err = src.RunCmd(arg); err != nil {
			return nil, from, fmt.Errorf("running the command: %w", err)
		}
		value = bytes.TrimRight(value, "\r\n")
	}
	if len(value) == 0 {
		return nil, from, fmt.Errorf("the value from %s is empty", from)
	}
	return value, from, nil
}

// MarshalText writes the spec in --secret form, so a stored spec (a
// detached sandbox's, in its state dir) is the flag the user would write.
func (sp Spec) MarshalText() ([]byte, error) { return []byte(sp.String()), nil }

// UnmarshalText parses a spec in --secret form.
func (sp *Spec) UnmarshalText(b []byte) error {
	p, err := ParseSpec(string(b))
	if err != nil {
		return err
	}
	*sp = p
	return nil
}
