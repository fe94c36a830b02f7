package secrets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
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
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	const max = 1 << 20
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && len(b) > max {
		err = fmt.Errorf("%s is larger than 1 MiB", path)
	}
	return b, err
}

// ParseFlag parses one --secret flag (see FlagSyntax and FlagHelp) and reads the value.
//
// Hosts and options follow the last '@', which cannot occur in them, so a file path or
// command may contain '@'. The syntax takes no literal value: a value on the command
// line would be in shell history and ps. Everything is checked before the value is
// read, so a mistyped host never runs the command. Errors name the secret (or the flag,
// when the name itself is bad) but never quote the source text or the value.
func ParseFlag(flag string, src Sources) (*Secret, error) {
	at := strings.LastIndexByte(flag, '@')
	if at < 0 {
		return nil, fmt.Errorf(`--secret: missing "@HOST"; write %s, e.g. GITHUB_TOKEN@api.github.com`, FlagSyntax)
	}
	head, tail := flag[:at], flag[at+1:]
	name, source, hasSource := strings.Cut(head, "=")
	if err := checkName(name); err != nil {
		// The text is not quoted: someone who typed a literal value here would see it
		// echoed into logs.
		if name == "" {
			return nil, fmt.Errorf("--secret: no NAME before '@' or '='; write %s", FlagSyntax)
		}
		return nil, fmt.Errorf("--secret: the text before '@' or '=' is %w; write %s", err, FlagSyntax)
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("--secret %s: "+format, append([]any{name}, args...)...)
	}
	if strings.Contains(tail, "://") {
		return nil, fail("a URL after '@'; write the host alone, e.g. %s@api.example.com", name)
	}
	hostList, opts := cutOptions(tail)
	if slices.Contains(opts, "") {
		return nil, fail("an empty option after ':'; write IPv6 addresses in brackets, as in [::1]")
	}
	if hostList == "" {
		return nil, fail(`no hosts after '@'; name the hosts the value may go to, e.g. %s@api.example.com`, name)
	}
	hosts, err := normalizeHosts(strings.Split(hostList, ","))
	if err != nil {
		return nil, fail("%w", err)
	}
	inBody, prefix, git := false, "", ""
	for _, o := range opts {
		switch p, isPrefix := strings.CutPrefix(o, "prefix="); {
		case o == "body":
			inBody = true
		case o == "git":
			git = DefaultGitUser
		case strings.HasPrefix(o, "git="):
			if git = o[len("git="):]; !validGitUser(git) {
				return nil, fail("the user after :git= may hold only letters, digits and - . _")
			}
		case isPrefix:
			if err := checkPrefix(p); err != nil {
				return nil, fail("%w", err)
			}
			if p == "" {
				return nil, fail("empty :prefix=")
			}
			prefix = p
		case o != "" && strings.Trim(o, "0123456789") == "":
			return nil, fail("secrets are bound to hosts, not ports; drop :%s", o)
		default:
			return nil, fail("unknown option %q after the hosts; options are :body, :prefix=TEXT and :git[=USER]", o)
		}
	}
	if app, ok := strings.CutPrefix(source, "github-app:"); ok && hasSource {
		s, err := appSecret(name, app, hosts, prefix, src)
		if err != nil {
			return nil, fail("%w", err)
		}
		s.InBody, s.Git = inBody, git
		return s, nil
	}
	value, from, err := readValue(name, source, hasSource, src)
	if err != nil {
		return nil, fail("%w", err)
	}
	s, err := newSecret(name, value, hosts, prefix)
	if err != nil {
		return nil, fmt.Errorf("--secret %s: from %s: %w", name, from, errors.Unwrap(err))
	}
	s.InBody, s.Git = inBody, git
	return s, nil
}

// appSecret mints the first token of a github-app: source and makes a
// rotating secret that the source's keeper refreshes.
func appSecret(name, text string, hosts []string, prefix string, src Sources) (*Secret, error) {
	app, err := ParseAppSource(text)
	if err != nil {
		return nil, fmt.Errorf("github-app: %w", err)
	}
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

// readValue resolves the source; from describes it for errors ("env FOO", "file:PATH",
// "cmd") without any of the value.
func readValue(name, source string, hasSource bool, src Sources) (value []byte, from string, err error) {
	kind, arg := "env", name
	if hasSource {
		var ok bool
		if kind, arg, ok = strings.Cut(source, ":"); !ok || (kind != "env" && kind != "file" && kind != "cmd") {
			return nil, "", fmt.Errorf("the source after '=' must be env:VAR, file:PATH, cmd:COMMAND or github-app:...; "+
				"a literal value is not accepted, as it would stay in shell history and ps (to use env var %s, write %s@HOSTS)", name, name)
		}
		if arg == "" {
			return nil, "", fmt.Errorf("empty %s: source", kind)
		}
	}
	switch kind {
	case "env":
		if err := checkName(arg); err != nil {
			return nil, "", fmt.Errorf("env: %w", err)
		}
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
