package secrets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// AppSource is a github-app: source: the App installation whose tokens are
// the secret's value, and their scope. Minting is the caller's (see
// Sources.GitHubApp); this package only reads the text.
type AppSource struct {
	AppID, InstallationID string
	Key                   string            // the App's private key file
	Repos                 []string          // repositories the token is limited to
	Permissions           map[string]string // name → read|write|admin; nil: the App's own
	API                   string            // "" is GitHub's
}

// maxAppSource bounds the text ParseAppSource reads.
const maxAppSource = 8 << 10

// ParseAppSource reads "app=ID;installation=ID;key=PATH;repos=NAME,NAME
// [;permissions=NAME:ACCESS,...][;api=URL]". It checks form only: the
// minter checks values (numbers, names) before it reads the key.
func ParseAppSource(text string) (AppSource, error) {
	var a AppSource
	if len(text) > maxAppSource {
		return a, fmt.Errorf("longer than %d KiB", maxAppSource>>10)
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(text, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || v == "" {
			return a, fmt.Errorf("%q is not KEY=VALUE; write app=ID;installation=ID;key=PATH;repos=NAME,...", cut(part))
		}
		if seen[k] {
			return a, fmt.Errorf("%s= given twice", k)
		}
		seen[k] = true
		switch k {
		case "app":
			a.AppID = v
		case "installation":
			a.InstallationID = v
		case "key":
			a.Key = v
		case "api":
			a.API = v
		case "repos":
			for _, r := range strings.Split(v, ",") {
				if r == "" {
					return a, errors.New("an empty name in repos=")
				}
				a.Repos = append(a.Repos, r)
			}
		case "permissions":
			a.Permissions = map[string]string{}
			for _, p := range strings.Split(v, ",") {
				n, acc, ok := strings.Cut(p, ":")
				if !ok || n == "" || acc == "" {
					return a, fmt.Errorf("permissions= takes NAME:ACCESS pairs such as contents:write, not %q", cut(p))
				}
				if _, dup := a.Permissions[n]; dup {
					return a, fmt.Errorf("permission %q given twice", cut(n))
				}
				a.Permissions[n] = acc
			}
		default:
			return a, fmt.Errorf("unknown key %q; keys are app, installation, key, repos, permissions and api", cut(k))
		}
	}
	for _, k := range []string{"app", "installation", "key", "repos"} {
		if !seen[k] {
			return a, fmt.Errorf("no %s=; write app=ID;installation=ID;key=PATH;repos=NAME,...", k)
		}
	}
	return a, nil
}

// cut keeps quoted bits of a source short in errors.
func cut(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// AppKeyFile returns the secret's name and its App key file (absolute, ~/
// expanded) if flag is a github-app: secret whose source reads; the engine
// hides the file from the sandbox.
func AppKeyFile(flag string) (name, key string, ok bool) {
	sp, err := ParseSpec(flag)
	if err != nil || sp.Kind != "github-app" {
		return "", "", false // a bad one is reported when the secret is read
	}
	name, key = sp.Name, sp.App.Key
	if rest, isHome := strings.CutPrefix(key, "~/"); isHome {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", "", false
		}
		key = filepath.Join(home, rest)
	}
	if key, err = filepath.Abs(key); err != nil {
		return "", "", false
	}
	return name, key, true
}
