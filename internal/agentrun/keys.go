package agentrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/airlock-dev/airlock/internal/agents"
	"github.com/airlock-dev/airlock/internal/credentials"
	"github.com/airlock-dev/airlock/internal/secrets"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// Credentials finds the agent's keys on the host; with none, its OAuth
// login stands in, kept fresh on the host until stop is called. Warnings
// (unless quiet) and a failed refresh go to stderr.
func Credentials(p *agents.Profile, userSecrets []secrets.Spec, agentHome string, stderr io.Writer, quiet bool) (secs []*secrets.Secret, keys map[string]string, stop func(), err error) {
	secs, keys, err = Keys(p, userSecrets)
	var noKey ErrNoKey
	if !errors.As(err, &noKey) {
		return secs, keys, func() {}, err
	}
	login, lerr := Login(p, agentHome)
	if lerr != nil {
		return nil, nil, nil, lerr
	}
	if login == nil {
		return nil, nil, nil, err
	}
	login.Warn = func(err error) {
		if !quiet {
			fmt.Fprintf(stderr, "airlock: warning: %v\n", err)
		}
	}
	go func() {
		if err := login.Run(context.Background()); err != nil {
			fmt.Fprintf(stderr, "airlock: %v\n", err)
		}
	}()
	return []*secrets.Secret{login.Secret()}, keys, func() { login.Close() }, nil
}

// Keys turns each of the profile's keys set on the host into a secret
// (the sandbox sees its placeholder) and returns them with Env → placeholder.
// A key the user gave with --secret is theirs. With no key at all, the error
// says which variables and files were looked for.
func Keys(p *agents.Profile, userSecrets []secrets.Spec) ([]*secrets.Secret, map[string]string, error) {
	given := map[string]bool{}
	for _, sp := range userSecrets {
		given[sp.Name] = true
	}
	var secs []*secrets.Secret
	keys := map[string]string{}
	var looked []string
	for _, k := range p.Keys {
		if given[k.Env] {
			keys[k.Env] = ""
			continue
		}
		for _, src := range k.Sources() {
			looked = AppendNew(looked, src)
			if v, ok := os.LookupEnv(src); !ok || v == "" {
				continue
			}
			sp, err := secrets.EnvSpec(k.Env, src, k.Hosts, k.Prefix)
			if err != nil {
				return nil, nil, fmt.Errorf("agent %s: %w", p.Name, err)
			}
			s, err := sp.Open(secrets.DefaultSources())
			if err != nil {
				return nil, nil, fmt.Errorf("agent %s: %w", p.Name, err)
			}
			secs = append(secs, s)
			keys[k.Env] = s.Placeholder
			break
		}
	}
	if len(keys) == 0 && len(p.Keys) > 0 {
		msg := fmt.Sprintf("%s needs an API key and none was found: set %s on the host", p.Display, strings.Join(looked, " or "))
		for _, l := range p.Logins {
			msg += fmt.Sprintf(", or log in with %s so ~/%s exists", p.Binary, l.Path)
		}
		return nil, nil, ErrNoKey{msg + " (it stays on the host; the sandbox sees a placeholder), or pass --secret NAME@HOST"}
	}
	return secs, keys, nil
}

// ErrNoKey: none of an agent's keys is set (a login may stand in).
type ErrNoKey struct{ msg string }

func (e ErrNoKey) Error() string { return e.msg }

// Login opens the agent's first OAuth login found in the user's real
// home: the sandbox's copy (a placeholder token, no refresh token) goes to
// the agent's home, the real token to the gateway; Run keeps it fresh.
func Login(p *agents.Profile, agentHome string) (*credentials.Login, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, nil
	}
	for _, l := range p.Logins {
		if len(credentials.Find(home, l.Path)) == 0 {
			continue
		}
		login, err := credentials.Open(context.Background(), home, l.Path, l.Hosts)
		if err != nil {
			return nil, fmt.Errorf("%s login ~/%s: %w", p.Display, l.Path, err)
		}
		if err := workspace.WriteFileBeneath(agentHome, l.Path, login.SandboxFile()); err != nil {
			login.Close()
			return nil, fmt.Errorf("%s login: the agent's home: %w", p.Display, err)
		}
		return login, nil
	}
	return nil, nil
}
