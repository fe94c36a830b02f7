package agentrun

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/workspace"
	"golang.org/x/sys/unix"
)

// Dir is airlock's data dir for agents: installs, homes, sessions.
func Dir() (string, error) {
	d, err := config.DataDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "agents"), nil
}

func InstallDir(name string) (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "install", name), nil
}

// Home is the agent's private home for a project, made if missing:
// kept across runs (logins, history, sessions), never the user's own.
func Home(name, project string) (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(project))
	h := filepath.Join(d, "homes", filepath.Base(project)+"-"+hex.EncodeToString(sum[:6]), name)
	if err := os.MkdirAll(h, 0o700); err != nil {
		return "", fmt.Errorf("agent home: %w", err)
	}
	return h, nil
}

// WriteHomeFiles writes the profile's files into the agent's home. The
// home is the sandbox's to write: a link it planted (say .claude →
// ~/.ssh) must not lead these writes out, so every directory is opened
// beneath the home without following links, and each file is replaced by
// a rename, never written through.
func WriteHomeFiles(home string, files map[string][]byte) error {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := workspace.WriteFileBeneath(home, n, files[n]); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	return nil
}

// ChownTree gives dir and everything in it to uid:gid, links themselves
// (never their targets). The home may hold what an earlier sandbox left,
// and another run's sandbox may be changing it now: each directory is
// opened from its parent's descriptor without following a link, so a
// directory swapped for a link cannot lead the walk (as root) outside.
func ChownTree(dir string, uid, gid int) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		unix.Close(fd)
		return fmt.Errorf("chown %s: %w", dir, err)
	}
	return chownBeneath(fd, dir, uid, gid, 0)
}

// chownBeneath chowns the entries of the directory fd (closing it), and
// recurses into its subdirectories, at most 64 deep.
func chownBeneath(fd int, name string, uid, gid, depth int) error {
	d := os.NewFile(uintptr(fd), name)
	defer d.Close()
	if depth > 64 {
		return fmt.Errorf("chown %s: nested more than 64 directories deep", name)
	}
	for {
		names, err := d.Readdirnames(1024)
		for _, n := range names {
			p := filepath.Join(name, n)
			if err := unix.Fchownat(fd, n, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("chown %s: %w", p, err)
			}
			var st unix.Stat_t
			if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				continue
			}
			sub, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue // replaced meanwhile (by a link, say): not followed
			}
			if err := chownBeneath(sub, p, uid, gid, depth+1); err != nil {
				return err
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("chown %s: %w", name, err)
		}
	}
}
