package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/devcontainer"
	"github.com/airlock-dev/airlock/internal/dockerengine"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// devcontainerAuto is --devcontainer given without a path: the workspace's
// .devcontainer/devcontainer.json or .devcontainer.json.
const devcontainerAuto = "\x00auto"

// buildTimeout bounds a devcontainer image build.
const buildTimeout = 30 * time.Minute

// devcontainerBackend makes c run on the docker backend, which a
// devcontainer needs: the default (native) becomes docker before the spec
// is checked; another backend chosen is a mistake.
func devcontainerBackend(c *config.Spec) error {
	if n := c.BackendName(); n != config.BackendDocker && n != config.BackendNative {
		return usageError{fmt.Sprintf("--devcontainer runs on the docker backend, not %s: drop --backend or use --backend docker", n)}
	}
	c.Backend = config.BackendDocker
	return nil
}

// applyDevcontainer makes spec run in the environment the workspace's
// devcontainer.json describes, once that file (and its Dockerfile) is
// trusted: its image, or one built from its Dockerfile; its environment and
// working directory; its lifecycle commands run inside, before spec's
// command. env gets the extra variables. What it refuses or ignores is said
// on stderr, one line each.
func applyDevcontainer(spec *engine.Spec, path string, env *[]string) error {
	c := &spec.Config
	if err := devcontainerBackend(c); err != nil {
		return err
	}
	ws := c.Workspace.Path
	if path == devcontainerAuto {
		path = ""
	}
	// The file's own mistakes, and trust, are one line each: not a
	// mistake in how airlock was called.
	file, err := devcontainer.Find(ws, path)
	if err != nil {
		return err
	}
	l, err := devcontainer.Load(ws, filepath.Clean(file))
	if err != nil {
		return err
	}
	cdir, _ := config.Dir()
	if err := l.CheckTrust(cdir); err != nil {
		return err
	}
	say := func(s string) { fmt.Fprintf(os.Stderr, "airlock: devcontainer: %s\n", s) }
	for _, n := range l.Notes {
		say(n)
	}
	if l.Build != nil {
		img, err := buildDevcontainer(l, c, say)
		if err != nil {
			return err
		}
		c.Image = img
	} else {
		c.Image = l.Image
	}
	base, err := imageEnv(c.Image)
	if err != nil {
		return err
	}
	vars, notes := l.Env(ws)
	for _, n := range notes {
		say(n)
	}
	*env = append(append(*env, base...), vars...)
	if l.User != "" {
		say(fmt.Sprintf("%s: %s %q ignored: the sandbox runs as the workspace's owner, so what it writes is yours", l.File, l.UserKey, l.User))
	}
	if wd, note := l.Workdir(ws); note != "" {
		say(note)
	} else if wd != "" && spec.Workdir == "" {
		spec.Workdir = wd
	}
	// forwardPorts publish on the host's loopback at the same port, as
	// editors forward them; "SERVICE:PORT" names a compose service, which
	// airlock does not run.
	for _, p := range l.ForwardPorts {
		if !spec.Config.Network.Enabled() && !spec.Config.Approvals.Ask() {
			say(fmt.Sprintf("%s: forwardPorts %s not published: the sandbox has no network (give it one with --allow-host HOST or --ask)", l.File, p))
			continue
		}
		if _, err := strconv.ParseUint(p, 10, 16); err != nil {
			say(fmt.Sprintf("%s: forwardPorts %q ignored: only a port of this container can be published", l.File, p))
			continue
		}
		spec.Config.Ports = append(spec.Config.Ports, "127.0.0.1:"+p+":"+p)
	}
	if len(spec.Command) == 0 {
		if !l.OnCreate.Empty() || !l.PostCreate.Empty() || !l.PostStart.Empty() {
			say("the lifecycle commands run before a command: with -d and no command they do not run")
		}
		return nil
	}
	spec.Command = l.Wrap(spec.Command)
	return nil
}

// imageEnv is the ENV the image sets (its PATH, its toolchain's variables),
// which the sandbox's commands get as they would in the devcontainer, but
// for what airlock sets itself: the home, temp dir, proxies and its own.
func imageEnv(img string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := dockerengine.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	in, err := cli.ImageInspect(ctx, img)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("docker: image %s does not exist: pull or build it (airlock does not pull)", img)
		}
		return nil, fmt.Errorf("devcontainer: inspect image %s: %w", img, err)
	}
	if in.Config == nil {
		return nil, nil
	}
	var env []string
	for _, kv := range in.Config.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !config.ValidEnvName(k) || airlockOwnsVar(k) {
			continue
		}
		env = append(env, kv)
	}
	return env, nil
}

// airlockOwnsVar reports a variable the sandbox's environment sets itself
// (see egress.CAEnv for the CA's).
func airlockOwnsVar(k string) bool {
	u := strings.ToUpper(k)
	switch u {
	case "HOME", "TMPDIR", "HOSTNAME", "USER", "LOGNAME", "SSL_CERT_DIR",
		"NPM_CONFIG_CAFILE", "PIP_CERT", "CARGO_HTTP_CAINFO", "DENO_CERT", "GIT_SSL_CAINFO":
		return true
	}
	return strings.HasPrefix(u, "AIRLOCK_") || strings.HasSuffix(u, "_PROXY") ||
		strings.HasSuffix(u, "_CA_BUNDLE") || strings.HasSuffix(u, "_CERT_FILE") || strings.HasSuffix(u, "CERTS")
}

// buildDevcontainer builds l's image through the local engine, showing its
// progress, with the workspace's hidden files left out of the context.
func buildDevcontainer(l *devcontainer.Loaded, c *config.Spec, say func(string)) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cli, err := dockerengine.Connect(ctx)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	var rel []string
	for _, p := range c.Filesystem.Hide {
		if !filepath.IsAbs(p) {
			rel = append(rel, p)
		}
	}
	h, err := workspace.NewHider(rel)
	if err != nil {
		return "", err
	}
	prefix, _ := filepath.Rel(c.Workspace.Path, l.Build.Context)
	prefix = filepath.ToSlash(prefix)
	hide := func(r string, isDir bool) bool {
		if prefix != "." {
			r = prefix + "/" + r
		}
		return h.Match(r, isDir)
	}
	say(fmt.Sprintf("building %s (context %s)", l.Build.Dockerfile, l.Build.Context))
	return l.BuildImage(ctx, cli, hide, os.Stderr)
}

// trustDevcontainer shows DIR's devcontainer.json and the Dockerfile it
// names, then records their hash (or, with revoke, forgets it).
func trustDevcontainer(d, path string, revoke bool, w io.Writer) error {
	ws, err := resolveWorkspace(d)
	if err != nil {
		return err
	}
	if path == devcontainerAuto {
		path = ""
	}
	file, err := devcontainer.Find(ws, path)
	if err != nil {
		return err
	}
	file = filepath.Clean(file)
	cdir, cerr := config.Dir()
	if cerr != nil {
		return errNoConfigDir
	}
	if revoke {
		ok, err := config.Revoke(cdir, file)
		if err != nil {
			return err
		}
		if ok {
			fmt.Fprintf(w, "airlock: %s is no longer trusted\n", file)
		} else {
			fmt.Fprintf(w, "airlock: %s was not trusted\n", file)
		}
		return nil
	}
	l, err := devcontainer.Load(ws, file)
	if err != nil {
		return fmt.Errorf("%v (not trusted: fix it first)", err)
	}
	show := func(name string, data []byte) {
		fmt.Fprintf(w, "--- %s\n%s", name, printable(data))
		if len(data) > 0 && data[len(data)-1] != '\n' {
			fmt.Fprintln(w)
		}
	}
	show(file, l.Data)
	if l.Build != nil {
		show(l.Build.Dockerfile, l.Dockerfile)
	}
	fmt.Fprintln(w, "---")
	for _, n := range l.Notes {
		fmt.Fprintf(w, "airlock: devcontainer: %s\n", n)
	}
	if err := l.Trust(cdir); err != nil {
		return fmt.Errorf("record trust: %w", err)
	}
	fmt.Fprintf(w, "airlock: trusted %s (%s); a change to it or its Dockerfile needs airlock trust --devcontainer again\n", file, config.ContentHash(l.Bundle))
	return nil
}
