package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlock-dev/airlock/internal/agents"
	"github.com/airlock-dev/airlock/internal/config"
)

func newConfigCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "config",
		Short: "Show or edit airlock's settings for a project",
		Long: `airlock reads its settings from, later winning:

  built-in defaults
  ~/.config/airlock/config.yaml            global ($XDG_CONFIG_HOME is honoured)
  ~/.config/airlock/projects/HASH.yaml     the project's (airlock config edit)
  PROJECT/.airlock.yaml                    the repository's, once you trust it
                                           (airlock trust)
  flags

The project is the git repository holding the workspace, else the workspace.
Its file lives in your config dir, not in the workspace, because the sandbox
can write the workspace. Lists add up across sources, and a deny_hosts rule
from any of them always applies.`,
		Args: noArgs,
	}
	c.AddCommand(newConfigShowCmd(nil), newConfigEditCmd(nil))
	return c
}

// configShowOptions is what airlock config show needs.
type configShowOptions struct {
	IO        *ioStreams
	Workspace string // whose project; "" is the current directory's
	Origin    bool   // say where each value came from
	JSON      bool
	Agent     string // show the config of this agent's runs
}

func newConfigShowCmd(runF func(*configShowOptions) error) *cobra.Command {
	o := &configShowOptions{IO: systemIO()}
	c := &cobra.Command{
		Use:   "show [--origin] [--json]",
		Short: "Print the effective settings for the current project",
		Example: `  airlock config show --origin
  airlock config show --origin --agent claude     # what airlock agent run claude runs with
  airlock config show --json -w ~/src/app`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.IO.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return configShowRun(o)
		},
	}
	c.Flags().StringVarP(&o.Workspace, "workspace", "w", "", "the workspace whose project to show (default: the current directory)")
	c.Flags().BoolVar(&o.Origin, "origin", false, "say where each value came from")
	c.Flags().BoolVar(&o.JSON, "json", false, "print JSON: the spec, and with --origin each key's origins")
	c.Flags().StringVar(&o.Agent, "agent", "", "show the settings airlock agent run `NAME` runs with: its agents section applied")
	return c
}

func configShowRun(o *configShowOptions) error {
	w := o.IO.Out
	l, err := loadConfig(o.Workspace, nil, false, false)
	if err != nil {
		return err
	}
	if o.Agent != "" {
		if _, err := agents.Lookup(o.Agent); err != nil {
			return usageError{"--agent: " + err.Error()}
		}
		l.ApplyAgent(o.Agent)
	}
	if o.JSON {
		out := struct {
			Project string         `json:"project"`
			Files   []string       `json:"files"`
			Spec    config.Spec    `json:"spec"`
			Origins config.Origins `json:"origins,omitempty"`
		}{Project: l.Project, Files: l.Files, Spec: l.Spec}
		if out.Files == nil {
			out.Files = []string{}
		}
		if o.Origin {
			out.Origins = l.Origins
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintf(w, "# project: %s\n", l.Project)
	if l.Dir != "" {
		fmt.Fprintf(w, "# project file: %s\n", config.DisplayPath(config.ProjectFile(l.Dir, l.Project)))
	}
	for _, f := range l.Files {
		fmt.Fprintf(w, "# read: %s\n", config.DisplayPath(f))
	}
	var origins config.Origins
	if o.Origin {
		origins = l.Origins
	}
	return config.Show(w, l.Spec, origins)
}

// configEditOptions is what airlock config edit needs.
type configEditOptions struct {
	Workspace string // whose project; "" is the current directory's
}

func newConfigEditCmd(runF func(*configEditOptions) error) *cobra.Command {
	o := &configEditOptions{}
	c := &cobra.Command{
		Use:   "edit",
		Short: "Edit the current project's settings in $VISUAL or $EDITOR",
		Long: `Open the project's file (in your config dir) in $VISUAL, else $EDITOR, else vi,
creating it from a commented template, and check it when the editor exits.`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(o)
			}
			return configEditRun(o)
		},
	}
	c.Flags().StringVarP(&o.Workspace, "workspace", "w", "", "the workspace whose project to edit (default: the current directory)")
	return c
}

func configEditRun(o *configEditOptions) error {
	ws, err := resolveWorkspace(o.Workspace)
	if err != nil {
		return err
	}
	dir, err := config.Dir()
	if err != nil {
		return errNoConfigDir
	}
	project := config.ProjectOf(dir, ws)
	path := config.ProjectFile(dir, project)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if err := config.WriteFileAtomic(path, config.ProjectTemplate(project), 0o600); err != nil {
			return fmt.Errorf("create %s: %w", path, err)
		}
	}
	editor := os.Getenv("VISUAL")
	if editor == "" {
		editor = os.Getenv("EDITOR")
	}
	if editor == "" {
		editor = "vi"
	}
	interactive := term.IsTerminal(int(os.Stdin.Fd()))
	for {
		// Through sh, as git does, so EDITOR="code --wait" works.
		cmd := exec.Command("/bin/sh", "-c", editor+` "$1"`, "sh", path)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("editor %s: %v; the file is %s", editor, err, path)
		}
		_, err := config.ReadFile(path, config.SourceProject)
		if err == nil {
			fmt.Fprintf(os.Stderr, "airlock: %s is valid\n", config.DisplayPath(path))
			return nil
		}
		if !interactive {
			return err
		}
		fmt.Fprintf(os.Stderr, "airlock: %v\nEdit again? [Y/n] ", err)
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a == "n" || a == "no" {
			return err
		}
	}
}

// trustOptions is what airlock trust needs.
type trustOptions struct {
	IO     *ioStreams
	Dir    string // whose .airlock.yaml; "" is the current project's
	Revoke bool   // forget the trust instead
	// Devcontainer names a devcontainer.json to trust instead
	// (devcontainerAuto: the workspace's).
	Devcontainer string
}

func newTrustCmd(runF func(*trustOptions) error) *cobra.Command {
	o := &trustOptions{IO: systemIO()}
	c := &cobra.Command{
		Use:   "trust [DIR]",
		Short: "Let airlock use DIR's .airlock.yaml (default: the current project's)",
		Long: `A repository's own .airlock.yaml is written by whoever wrote the repository,
and can be changed by a sandbox working in it; airlock uses it only once you
have read it and trusted its exact content. trust prints the file, then
records its hash; after any change it is ignored again until you trust it
again. --revoke forgets it.

--devcontainer trusts DIR's devcontainer.json instead (and the Dockerfile it
builds from: a change to either needs airlock trust --devcontainer again),
for airlock run --devcontainer.`,
		Example: `  airlock trust
  airlock trust ~/src/app
  airlock trust --revoke
  airlock trust --devcontainer                     # .devcontainer/devcontainer.json
  airlock trust --devcontainer=.devcontainer/go/devcontainer.json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.Dir = args[0]
			}
			o.IO.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return trustRun(o)
		},
	}
	c.Flags().BoolVar(&o.Revoke, "revoke", false, "forget the trust in DIR's .airlock.yaml")
	c.Flags().StringVar(&o.Devcontainer, "devcontainer", "", "trust DIR's devcontainer.json and its Dockerfile (--devcontainer=PATH names the file)")
	c.Flags().Lookup("devcontainer").NoOptDefVal = devcontainerAuto
	return c
}

func trustRun(o *trustOptions) error {
	if o.Devcontainer != "" {
		return trustDevcontainer(o.Dir, o.Devcontainer, o.Revoke, o.IO.Out)
	}
	w, revoke := o.IO.Out, o.Revoke
	dir, err := resolveWorkspace(o.Dir)
	if err != nil {
		return err
	}
	file := filepath.Join(dir, config.RepoFileName)
	if _, err := os.Lstat(file); err != nil {
		if p := filepath.Join(projectOf(dir), config.RepoFileName); p != file {
			if _, err := os.Lstat(p); err == nil {
				file = p
			}
		}
	}
	cdir, cerr := config.Dir()
	if revoke {
		if cerr != nil {
			return errNoConfigDir
		}
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
	if _, err := os.Lstat(file); err != nil {
		return fmt.Errorf("no %s in %s: nothing to trust", config.RepoFileName, dir)
	}
	// Read as config reads it: a regular file only, never blocking on a
	// FIFO the sandbox put there, never through a link.
	data, err := config.ReadRegular(file, config.MaxFileSize)
	if errors.Is(err, config.ErrNotRegular) {
		return fmt.Errorf("%s is not a regular file: it cannot be trusted", file)
	}
	if err != nil {
		return err
	}
	if _, err := config.Parse(file, data, config.SourceRepo); err != nil {
		return fmt.Errorf("%v (not trusted: fix it first)", err)
	}
	if cerr != nil {
		return errNoConfigDir
	}
	fmt.Fprintf(w, "--- %s\n%s", file, printable(data))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "---")
	if err := config.Trust(cdir, file, data); err != nil {
		return fmt.Errorf("record trust: %w", err)
	}
	fmt.Fprintf(w, "airlock: trusted %s (%s); a change to it needs airlock trust again\n", file, config.ContentHash(data))
	return nil
}

// printable shows control characters (other than newline and tab) as '?',
// so the file cannot rewrite the terminal while it is being reviewed.
func printable(b []byte) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || (r >= 0x20 && r != 0x7f && !(r >= 0x80 && r < 0xa0)) {
			return r
		}
		return '?'
	}, string(b))
}

// projectOf is the project of workspace ws, as config.ProjectOf records it
// in the user's config dir.
func projectOf(ws string) string {
	dir, _ := config.Dir()
	return config.ProjectOf(dir, ws)
}
