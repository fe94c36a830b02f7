package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/internal/backend/guestclient"
	"github.com/airlock-dev/airlock/internal/proto"
)

// The workspace is the engine's staged copy (copy mode), uploaded into the
// Pod's workspace emptyDir through the guest's file requests at the start,
// and brought back into the copy at the end, where the engine reviews it
// as on the other backends. What comes back is the sandbox's: names,
// sizes and counts are bounded, and it is written through an os.Root at
// the copy, which no name or link can leave.
const (
	maxFile          = proto.MaxFrame - 128<<10 // one file request's data
	maxEntries       = 1 << 18
	maxDownloadBytes = 8 << 30
)

// entry is one file of a workspace, as listed.
type entry struct {
	mode fs.FileMode
	size int64
	mod  int64
	link string
}

// syncState is what upload left in the Pod, for download to compare.
type syncState struct {
	inside  string
	pod     map[string]entry // by slash path relative to the workspace
	skipped map[string]bool  // host paths not uploaded (links, large files): left alone
}

// upload copies the host directory src into the Pod's workspace dst.
func upload(ctx context.Context, c *guestclient.Client, src, dst string) (*syncState, []string, error) {
	st := &syncState{inside: dst, skipped: map[string]bool{}}
	var warnings []string
	links, large := 0, 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		target := path.Join(dst, rel)
		switch {
		case d.IsDir():
			return call(ctx, c, &proto.Msg{Op: proto.OpMkdir, Path: target, Mode: uint32(info.Mode().Perm())})
		case info.Mode().IsRegular():
			if info.Size() > maxFile {
				large++
				st.skipped[rel] = true
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return call(ctx, c, &proto.Msg{Op: proto.OpWriteFile, Path: target, Mode: uint32(info.Mode().Perm()), Data: b})
		default:
			links++
			st.skipped[rel] = true
			return nil
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes: upload the workspace: %w", err)
	}
	if links > 0 {
		warnings = append(warnings, fmt.Sprintf("kubernetes: %d symbolic links and special files of the workspace were not uploaded (they stay as they are)", links))
	}
	if large > 0 {
		warnings = append(warnings, fmt.Sprintf("kubernetes: %d files of the workspace larger than %d MiB were not uploaded (they stay as they are)", large, maxFile>>20))
	}
	if st.pod, err = listTree(ctx, c, dst); err != nil {
		return nil, nil, fmt.Errorf("kubernetes: list the uploaded workspace: %w", err)
	}
	return st, warnings, nil
}

func call(ctx context.Context, c *guestclient.Client, m *proto.Msg) error {
	r, err := c.Call(ctx, m)
	if err != nil {
		return fmt.Errorf("%s %s: %w", m.Op, m.Path, err)
	}
	if r.Op == proto.OpError && r.Err != nil {
		return fmt.Errorf("%s %s: %s", m.Op, m.Path, r.Err.Message)
	}
	return nil
}

// listTree lists the Pod's directory root recursively, bounded.
func listTree(ctx context.Context, c *guestclient.Client, root string) (map[string]entry, error) {
	out := map[string]entry{}
	var walk func(rel string) error
	walk = func(rel string) error {
		r, err := c.Call(ctx, &proto.Msg{Op: proto.OpListFiles, Path: path.Join(root, rel)})
		if err != nil {
			return err
		}
		if r.Op == proto.OpError && r.Err != nil {
			return errors.New(r.Err.Message)
		}
		for _, f := range r.Files {
			if !validName(f.Name) {
				return fmt.Errorf("the sandbox listed a bad name %q", f.Name)
			}
			p := path.Join(rel, f.Name)
			if len(out) >= maxEntries {
				return fmt.Errorf("the workspace holds more than %d entries", maxEntries)
			}
			mode := fs.FileMode(f.Mode)
			out[p] = entry{mode: mode, size: f.Size, mod: f.ModTime, link: f.Link}
			if mode.IsDir() {
				if err := walk(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, walk("")
}

func validName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, "/\x00")
}

// download brings the Pod's workspace into the host directory dst: what
// changed since upload is written, what went is removed (but what upload
// skipped, which the Pod never had).
func download(ctx context.Context, c *guestclient.Client, st *syncState, dst string) error {
	now, err := listTree(ctx, c, st.inside)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	// Removals first, deepest first, so a directory replaced by a file
	// (or the reverse) is free for it.
	var gone []string
	for p, was := range st.pod {
		if is, ok := now[p]; !ok || is.mode.Type() != was.mode.Type() {
			gone = append(gone, p)
		}
	}
	sortDeepFirst(gone)
	for _, p := range gone {
		if skippedUnder(st.skipped, p) {
			continue
		}
		if err := root.RemoveAll(filepath.FromSlash(p)); err != nil {
			return err
		}
	}
	var total int64
	var tooLarge []string
	for _, p := range sortedShallowFirst(now) {
		e := now[p]
		was, had := st.pod[p]
		same := had && was.mode == e.mode && was.size == e.size && was.mod == e.mod && was.link == e.link
		if same {
			continue
		}
		hp := filepath.FromSlash(p)
		switch {
		case e.mode.IsDir():
			if err := root.Mkdir(hp, e.mode.Perm()|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			root.Chmod(hp, e.mode.Perm()|0o700)
		case e.mode&fs.ModeSymlink != 0:
			root.Remove(hp)
			if err := root.Symlink(e.link, hp); err != nil {
				return err
			}
		case e.mode.IsRegular():
			if e.size > maxFile {
				tooLarge = append(tooLarge, p)
				continue
			}
			if total += e.size; total > maxDownloadBytes {
				return fmt.Errorf("the workspace grew past %d GiB", maxDownloadBytes>>30)
			}
			r, err := c.Call(ctx, &proto.Msg{Op: proto.OpReadFile, Path: path.Join(st.inside, p)})
			if err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
			if r.Op == proto.OpError && r.Err != nil {
				return fmt.Errorf("read %s: %s", p, r.Err.Message)
			}
			if had && !was.mode.IsRegular() {
				root.RemoveAll(hp)
			}
			// A link the sandbox made in the copy's place is replaced,
			// not followed.
			if fi, err := root.Lstat(hp); err == nil && !fi.Mode().IsRegular() {
				root.RemoveAll(hp)
			}
			f, err := root.OpenFile(hp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, e.mode.Perm())
			if err != nil {
				return err
			}
			_, werr := f.Write(r.Data)
			if cerr := f.Close(); werr == nil {
				werr = cerr
			}
			if werr != nil {
				return werr
			}
			root.Chmod(hp, e.mode.Perm())
		}
		// Sockets, FIFOs and devices made inside are not brought back.
	}
	if len(tooLarge) > 0 {
		return fmt.Errorf("%d files larger than %d MiB were not brought back (%s…); the rest was", len(tooLarge), maxFile>>20, tooLarge[0])
	}
	return nil
}

func skippedUnder(skipped map[string]bool, p string) bool {
	for s := range skipped {
		if s == p || strings.HasPrefix(s, p+"/") {
			return true
		}
	}
	return false
}

// sortDeepFirst sorts slash paths so that children come before parents.
func sortDeepFirst(ps []string) {
	slices.SortFunc(ps, func(a, b string) int {
		if d := strings.Count(b, "/") - strings.Count(a, "/"); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
}

// sortedShallowFirst is m's paths, parents before children.
func sortedShallowFirst(m map[string]entry) []string {
	ps := slices.Collect(maps.Keys(m))
	slices.SortFunc(ps, func(a, b string) int {
		if d := strings.Count(a, "/") - strings.Count(b, "/"); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return ps
}
