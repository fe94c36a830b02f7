package devcontainer

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/client"
)

// Bounds of a build context sent to the engine (variables for the tests).
var (
	MaxContextBytes int64 = 512 << 20
	MaxContextFiles       = 100_000
)

// ImageTag is the tag of the image built for l: one per trusted bundle.
func (l *Loaded) ImageTag() string {
	h := strings.TrimPrefix(hashOf(l.Bundle), "sha256:")
	return "airlock-devcontainer/" + h[:16] + ":latest"
}

// Skip reports whether a path of the context (slash-separated, relative)
// stays out of it: files the sandbox would not see must not be baked into
// an image it runs.
type Skip func(rel string, isDir bool) bool

// BuildImage builds l's image through the Engine API from a tar of its context,
// showing the engine's progress on progress, and returns its tag. hide
// leaves paths out of the context (the workspace's hidden files). A failed
// build names the step that failed.
func (l *Loaded) BuildImage(ctx context.Context, cli *client.Client, hide Skip, progress io.Writer) (string, error) {
	b := l.Config.Build
	rel, _ := filepath.Rel(b.Context, b.Dockerfile)
	tag := l.ImageTag()
	pr, pw := io.Pipe()
	defer pr.Close() // the writer stops if the engine stopped reading
	go func() { pw.CloseWithError(WriteContext(pw, b.Context, hide, filepath.ToSlash(rel))) }()
	args := map[string]*string{}
	for k, v := range b.Args {
		args[k] = &v
	}
	resp, err := cli.ImageBuild(ctx, pr, build.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  filepath.ToSlash(rel),
		BuildArgs:   args,
		Target:      b.Target,
		Remove:      true,
		ForceRemove: true,
		NetworkMode: "none", // the build reaches no network: what it needs is in the context
		Version:     build.BuilderV1,
		Labels:      map[string]string{"airlock.devcontainer": l.File},
	})
	if err != nil {
		pr.CloseWithError(err)
		return "", fmt.Errorf("devcontainer: build %s: send the context: %w", b.Dockerfile, err)
	}
	defer resp.Body.Close()
	if err := readBuild(resp.Body, progress); err != nil {
		return "", fmt.Errorf("devcontainer: build %s: %w", b.Dockerfile, err)
	}
	return tag, nil
}

// readBuild shows the engine's build stream and turns its error into one
// naming the step that failed.
func readBuild(r io.Reader, progress io.Writer) error {
	dec := json.NewDecoder(bufio.NewReader(io.LimitReader(r, 64<<20)))
	step := ""
	var partial strings.Builder
	for {
		var m struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read the engine's progress: %w", err)
		}
		if m.Error != "" || m.ErrorDetail.Message != "" {
			msg := m.ErrorDetail.Message
			if msg == "" {
				msg = m.Error
			}
			if step == "" {
				return errors.New(clean(msg))
			}
			return fmt.Errorf("%s failed: %s", step, clean(msg))
		}
		partial.WriteString(m.Stream)
		s := partial.String()
		for {
			line, rest, ok := strings.Cut(s, "\n")
			if !ok {
				break
			}
			s = rest
			line = clean(line)
			if strings.HasPrefix(line, "Step ") {
				step = line
			}
			if line != "" && progress != nil {
				fmt.Fprintf(progress, "  %s\n", line)
			}
		}
		partial.Reset()
		if len(s) < 64<<10 {
			partial.WriteString(s)
		}
	}
}

// clean makes the engine's text (which the Dockerfile's commands wrote) one
// line without control characters.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	s = strings.TrimSpace(s)
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return s
}

// WriteContext writes dir as a build context tar to w: regular files,
// directories and symbolic links (stored as links, never followed, so
// nothing outside dir is read); other files are left out; hide leaves
// paths out, except the Dockerfile (dockerfile, relative). It stops with
// an error past MaxContextBytes or MaxContextFiles.
func WriteContext(w io.Writer, dir string, hide Skip, dockerfile string) error {
	tw := tar.NewWriter(w)
	var total int64
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if hide != nil && rel != dockerfile && hide(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if files++; files > MaxContextFiles {
			return fmt.Errorf("the build context %s has more than %d files", dir, MaxContextFiles)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.IsDir(), info.Mode().IsRegular():
		default:
			return nil // sockets, FIFOs, devices: nothing to build from
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.Uid, hdr.Gid = 0, 0
		if !info.Mode().IsRegular() {
			return tw.WriteHeader(hdr)
		}
		// Opened without following a link put there since the walk, and
		// checked to be the file that was walked.
		fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", p, err)
		}
		f := os.NewFile(uintptr(fd), p)
		defer f.Close()
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			return fmt.Errorf("%s changed while the context was read", p)
		}
		if total += st.Size(); total > MaxContextBytes {
			return fmt.Errorf("the build context %s is larger than %d bytes", dir, MaxContextBytes)
		}
		hdr.Size = st.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		n, err := io.Copy(tw, io.LimitReader(f, hdr.Size))
		if err == nil && n != hdr.Size {
			err = fmt.Errorf("%s changed while the context was read", p)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("devcontainer: build context: %w", err)
	}
	return tw.Close()
}
