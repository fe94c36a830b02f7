package vfs

import "golang.org/x/sys/unix"

// ReadOnly wraps a provider and refuses every change with EROFS.
func ReadOnly(p Provider) Provider { return readOnly{p} }

type readOnly struct{ Provider }

func (r readOnly) Open(p string, flags int) (File, error) {
	if writing(flags) {
		return nil, unix.EROFS
	}
	f, err := r.Provider.Open(p, flags)
	if err != nil {
		return nil, err
	}
	return roFile{f}, nil
}

func (readOnly) Create(string, int, uint32) (File, error) { return nil, unix.EROFS }
func (readOnly) Mkdir(string, uint32) error               { return unix.EROFS }
func (readOnly) Remove(string) error                      { return unix.EROFS }
func (readOnly) Rename(string, string) error              { return unix.EROFS }
func (readOnly) Symlink(string, string) error             { return unix.EROFS }
func (readOnly) Link(string, string) error                { return unix.EROFS }
func (readOnly) Setattr(string, SetAttr) (Attr, error)    { return Attr{}, unix.EROFS }

type roFile struct{ File }

func (roFile) WriteAt([]byte, int64) (int, error) { return 0, unix.EBADF }
func (roFile) Truncate(int64) error               { return unix.EROFS }
