// Package devcontainer reads a project's devcontainer.json into what the
// docker backend can honour, and says which of its properties it refuses.
package devcontainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/tailscale/hujson"

	"github.com/airlock-dev/airlock/internal/config"
)

// MaxFileSize bounds a devcontainer.json and the Dockerfile it names: the
// two together fit a trust record (config.MaxFileSize).
const MaxFileSize = 256 << 10

// Candidates are where a workspace's devcontainer.json is looked for, in order.
var Candidates = []string{".devcontainer/devcontainer.json", ".devcontainer.json"}

// Config is the part of a devcontainer.json airlock honours.
type Config struct {
	File string // absolute path of the devcontainer.json
	Dir  string // its directory: build paths are relative to it

	Image string
	Build *Build // nil without a build section

	ContainerEnv map[string]string
	RemoteEnv    map[string]string
	User         string // remoteUser, else containerUser
	UserKey      string // which of the two named User

	WorkspaceFolder string
	// ForwardPorts are the ports to publish, as "PORT" or "HOST:PORT"
	// strings: the one field the published-ports wiring reads.
	ForwardPorts []string

	// Lifecycle commands, in the order they run.
	OnCreate, PostCreate, PostStart Command

	// Notes are one line each: a property refused or ignored and why, an
	// unknown property.
	Notes []string
}

// Build is the build section; paths are absolute.
type Build struct {
	Dockerfile string
	Context    string
	Args       map[string]string
	Target     string
}

// Command is a lifecycle command in one of the spec's three forms: a shell
// string, an argument vector, or named steps (each one of the two) that the
// spec runs in parallel.
type Command struct {
	Shell string
	Args  []string
	Steps map[string]Command
}

// Empty reports a command with nothing to run.
func (c Command) Empty() bool { return c.Shell == "" && len(c.Args) == 0 && len(c.Steps) == 0 }

// refused are the properties that would widen the sandbox, with why.
var refused = map[string]string{
	"privileged":        "a privileged container has every capability and device: the sandbox runs with none",
	"capAdd":            "the sandbox runs with no capability at all",
	"capabilities":      "the sandbox runs with no capability at all",
	"securityOpt":       "the sandbox's seccomp, no-new-privileges and Landlock are airlock's, not the file's",
	"securityOptions":   "the sandbox's seccomp, no-new-privileges and Landlock are airlock's, not the file's",
	"runArgs":           "docker run arguments could undo any of the sandbox's hardening",
	"mounts":            "host paths reach the sandbox only through --ro/--rw, which you choose",
	"workspaceMount":    "the workspace is bound by airlock, at its own path",
	"init":              "airlock's guest is the container's first process",
	"overrideCommand":   "airlock's guest is the container's first process",
	"features":          "features install as root with options of their own; put what you need in the Dockerfile",
	"appPort":           "ports are published only when you ask for them",
	"gpuRequirements":   "no device is passed into the sandbox",
	"initializeCommand": "it runs on the host, outside the sandbox, with your authority",
}

// ignored are properties that do not apply to a sandbox run, with why.
var ignored = map[string]string{
	"dockerComposeFile":    "compose projects are not supported: use image or build",
	"service":              "compose projects are not supported: use image or build",
	"runServices":          "compose projects are not supported: use image or build",
	"shutdownAction":       "the container lives as long as the run",
	"updateContentCommand": "not supported: use onCreateCommand",
	"postAttachCommand":    "there is no editor to attach: use postStartCommand",
	"hostRequirements":     "--memory and --cpus set the limits",
	"portsAttributes":      "it describes an editor's port view",
	"otherPortsAttributes": "it describes an editor's port view",
	"userEnvProbe":         "the environment is containerEnv and remoteEnv",
	"updateRemoteUserUID":  "the sandbox runs as the workspace's owner",
	"waitFor":              "every lifecycle command runs before your command",
}

// handled are the properties read here, and those with nothing to say.
var handled = map[string]bool{
	"image": true, "build": true, "dockerFile": true, "context": true,
	"containerEnv": true, "remoteEnv": true, "remoteUser": true, "containerUser": true,
	"workspaceFolder": true, "forwardPorts": true,
	"onCreateCommand": true, "postCreateCommand": true, "postStartCommand": true,
	"name": true, "customizations": true, "$schema": true,
}

// Parse reads a devcontainer.json (JSONC: comments and trailing commas are
// allowed) found at file. It does no I/O.
func Parse(file string, data []byte) (*Config, error) {
	std, err := hujson.Standardize(data)
	if err != nil {
		return nil, fmt.Errorf("devcontainer: %s: %v", file, err)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(std))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("devcontainer: %s: not a JSON object: %v", file, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("devcontainer: %s: not a JSON object", file)
	}
	c := &Config{File: file, Dir: filepath.Dir(file)}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if why, ok := refused[k]; ok {
			c.Notes = append(c.Notes, fmt.Sprintf("%s: %s refused: %s", file, k, why))
		} else if why, ok := ignored[k]; ok {
			c.Notes = append(c.Notes, fmt.Sprintf("%s: %s ignored: %s", file, k, why))
		} else if !handled[k] {
			c.Notes = append(c.Notes, fmt.Sprintf("%s: unknown property %q ignored", file, k))
		}
	}
	str := func(k string, dst *string) error {
		if v, ok := raw[k]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				return fmt.Errorf("devcontainer: %s: %s: want a string", file, k)
			}
		}
		return nil
	}
	strMap := func(k string, dst *map[string]string) error {
		if v, ok := raw[k]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				return fmt.Errorf("devcontainer: %s: %s: want an object of strings", file, k)
			}
			for name := range *dst {
				if !config.ValidEnvName(name) {
					return fmt.Errorf("devcontainer: %s: %s: %q is not a variable name", file, k, name)
				}
			}
		}
		return nil
	}
	if err := str("image", &c.Image); err != nil {
		return nil, err
	}
	if err := strMap("containerEnv", &c.ContainerEnv); err != nil {
		return nil, err
	}
	if err := strMap("remoteEnv", &c.RemoteEnv); err != nil {
		return nil, err
	}
	var ru, cu string
	if err := str("remoteUser", &ru); err != nil {
		return nil, err
	}
	if err := str("containerUser", &cu); err != nil {
		return nil, err
	}
	c.User, c.UserKey = cu, "containerUser"
	if ru != "" {
		c.User, c.UserKey = ru, "remoteUser"
	}
	if err := str("workspaceFolder", &c.WorkspaceFolder); err != nil {
		return nil, err
	}
	if err := parseBuild(c, raw); err != nil {
		return nil, err
	}
	if v, ok := raw["forwardPorts"]; ok {
		var ports []json.RawMessage
		if err := json.Unmarshal(v, &ports); err != nil {
			return nil, fmt.Errorf("devcontainer: %s: forwardPorts: want a list", file)
		}
		for _, p := range ports {
			s, err := port(p)
			if err != nil {
				return nil, fmt.Errorf("devcontainer: %s: forwardPorts: %v", file, err)
			}
			c.ForwardPorts = append(c.ForwardPorts, s)
		}
	}
	for _, lc := range []struct {
		key string
		dst *Command
	}{{"onCreateCommand", &c.OnCreate}, {"postCreateCommand", &c.PostCreate}, {"postStartCommand", &c.PostStart}} {
		if v, ok := raw[lc.key]; ok {
			cmd, err := parseCommand(v, true)
			if err != nil {
				return nil, fmt.Errorf("devcontainer: %s: %s: %v", file, lc.key, err)
			}
			*lc.dst = cmd
		}
	}
	if c.Image == "" && c.Build == nil {
		return nil, fmt.Errorf("devcontainer: %s: neither image nor build.dockerfile is set (compose projects are not supported)", file)
	}
	if c.Image != "" && c.Build != nil {
		c.Notes = append(c.Notes, fmt.Sprintf("%s: image %q ignored: build is set", file, c.Image))
		c.Image = ""
	}
	return c, nil
}

func parseBuild(c *Config, raw map[string]json.RawMessage) error {
	var b struct {
		Dockerfile string            `json:"dockerfile"`
		Context    string            `json:"context"`
		Args       map[string]string `json:"args"`
		Target     string            `json:"target"`
	}
	v, ok := raw["build"]
	if ok {
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(v, &keys); err != nil {
			return fmt.Errorf("devcontainer: %s: build: want an object", c.File)
		}
		for k := range keys {
			switch k {
			case "dockerfile", "context", "args", "target":
			case "cacheFrom", "options":
				c.Notes = append(c.Notes, fmt.Sprintf("%s: build.%s ignored: the build is airlock's own, from the local engine only", c.File, k))
			default:
				c.Notes = append(c.Notes, fmt.Sprintf("%s: unknown property \"build.%s\" ignored", c.File, k))
			}
		}
		if err := json.Unmarshal(v, &b); err != nil {
			return fmt.Errorf("devcontainer: %s: build: %v", c.File, err)
		}
	}
	// The older top-level spellings.
	if b.Dockerfile == "" {
		if v, ok := raw["dockerFile"]; ok {
			if err := json.Unmarshal(v, &b.Dockerfile); err != nil {
				return fmt.Errorf("devcontainer: %s: dockerFile: want a string", c.File)
			}
		}
	}
	if b.Context == "" {
		if v, ok := raw["context"]; ok {
			if err := json.Unmarshal(v, &b.Context); err != nil {
				return fmt.Errorf("devcontainer: %s: context: want a string", c.File)
			}
		}
	}
	if b.Dockerfile == "" {
		if ok {
			return fmt.Errorf("devcontainer: %s: build: dockerfile is not set", c.File)
		}
		return nil
	}
	if b.Context == "" {
		b.Context = "."
	}
	for k := range b.Args {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("devcontainer: %s: build.args: %q is not a name", c.File, k)
		}
	}
	c.Build = &Build{
		Dockerfile: filepath.Join(c.Dir, b.Dockerfile),
		Context:    filepath.Join(c.Dir, b.Context),
		Args:       b.Args,
		Target:     b.Target,
	}
	return nil
}

// port is one forwardPorts entry: a number, or "HOST:PORT".
func port(p json.RawMessage) (string, error) {
	var n int
	if err := json.Unmarshal(p, &n); err == nil {
		if n < 1 || n > 65535 {
			return "", fmt.Errorf("%d is not a port", n)
		}
		return strconv.Itoa(n), nil
	}
	var s string
	if err := json.Unmarshal(p, &s); err != nil {
		return "", fmt.Errorf("%s: want a port number or \"HOST:PORT\"", p)
	}
	host, ps, ok := strings.Cut(s, ":")
	if !ok {
		host, ps = "", s
	}
	n, err := strconv.Atoi(ps)
	if err != nil || n < 1 || n > 65535 || strings.ContainsAny(host, " /\x00") {
		return "", fmt.Errorf("%q: want a port number or \"HOST:PORT\"", s)
	}
	return s, nil
}

// parseCommand reads a lifecycle command; named steps may not nest.
func parseCommand(v json.RawMessage, top bool) (Command, error) {
	var c Command
	if err := json.Unmarshal(v, &c.Shell); err == nil {
		return c, nil
	}
	if err := json.Unmarshal(v, &c.Args); err == nil {
		for _, a := range c.Args {
			if strings.ContainsRune(a, 0) {
				return c, errors.New("an argument holds a NUL byte")
			}
		}
		return c, nil
	}
	var steps map[string]json.RawMessage
	if !top || json.Unmarshal(v, &steps) != nil {
		return c, errors.New("want a string, a list of strings or an object of those")
	}
	c.Steps = map[string]Command{}
	for name, s := range steps {
		sc, err := parseCommand(s, false)
		if err != nil {
			return c, fmt.Errorf("%s: %v", name, err)
		}
		c.Steps[name] = sc
	}
	return c, nil
}

// Find is the devcontainer.json of workspace ws: path when given (relative
// to ws), else the first of Candidates that exists.
func Find(ws, path string) (string, error) {
	if path != "" {
		if !filepath.IsAbs(path) {
			path = filepath.Join(ws, path)
		}
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			path = filepath.Join(path, "devcontainer.json")
		}
		return path, nil
	}
	for _, c := range Candidates {
		p := filepath.Join(ws, c)
		if _, err := os.Lstat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("devcontainer: no %s in %s: give its path with --devcontainer=PATH", strings.Join(Candidates, " or "), ws)
}
