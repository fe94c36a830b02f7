package guest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/airlock-dev/airlock/internal/proto"
)

// maxFileData keeps a file reply inside one frame.
const maxFileData = proto.MaxFrame - 64<<10

// file serves the file requests. Paths are the sandbox's: relative ones start
// at the workspace. The guest runs under the sandbox's Landlock rules, so a
// write outside the writable places fails here exactly as it would for a process.
func (g *guest) file(m *proto.Msg) (*proto.Msg, error) {
	if m.Path == "" {
		return nil, errors.New("path is empty")
	}
	p := m.Path
	if !filepath.IsAbs(p) {
		p = filepath.Join(g.workdir, p)
	}
	switch m.Op {
	case proto.OpWriteFile:
		mode := os.FileMode(m.Mode & 0o7777)
		if mode == 0 {
			mode = 0o644
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
		if err != nil {
			return nil, err
		}
		if _, err := f.Write(m.Data); err != nil {
			f.Close()
			return nil, err
		}
		return &proto.Msg{}, f.Close()
	case proto.OpReadFile:
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, maxFileData+1))
		if err != nil {
			return nil, err
		}
		if len(data) > maxFileData {
			return nil, fmt.Errorf("file is larger than %d bytes", maxFileData)
		}
		return &proto.Msg{Data: data}, nil
	case proto.OpListFiles:
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		if len(entries) > 1<<16 {
			entries = entries[:1<<16]
		}
		out := &proto.Msg{Files: make([]proto.FileInfo, 0, len(entries))}
		for _, e := range entries {
			if fi, err := info(filepath.Join(p, e.Name()), e.Name()); err == nil {
				out.Files = append(out.Files, fi)
			}
		}
		return out, nil
	case proto.OpStat:
		fi, err := info(p, filepath.Base(p))
		if err != nil {
			return nil, err
		}
		return &proto.Msg{Files: []proto.FileInfo{fi}}, nil
	case proto.OpMkdir:
		mode := os.FileMode(m.Mode & 0o7777)
		if mode == 0 {
			mode = 0o755
		}
		return &proto.Msg{}, os.MkdirAll(p, mode)
	case proto.OpRemove:
		if m.Recursive {
			return &proto.Msg{}, os.RemoveAll(p)
		}
		return &proto.Msg{}, os.Remove(p)
	}
	return nil, fmt.Errorf("unsupported request %s", m.Op)
}

func info(p, name string) (proto.FileInfo, error) {
	st, err := os.Lstat(p)
	if err != nil {
		return proto.FileInfo{}, err
	}
	fi := proto.FileInfo{Name: name, Size: st.Size(), Mode: uint32(st.Mode()), ModTime: st.ModTime().UnixNano()}
	if st.Mode()&os.ModeSymlink != 0 {
		fi.Link, _ = os.Readlink(p)
	}
	return fi, nil
}
