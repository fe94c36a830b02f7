package vfs

import (
	"github.com/airlock-dev/airlock/internal/audit"
	"golang.org/x/sys/unix"
)

// Ops a Hook sees.
const (
	OpOpen    = "open" // for reading
	OpWrite   = audit.OpWrite
	OpCreate  = audit.OpCreate
	OpMkdir   = "mkdir"
	OpRemove  = audit.OpRemove
	OpRename  = audit.OpRename
	OpSymlink = "symlink"
	OpLink    = "link"
	OpSetattr = "setattr"
)

// Event is one opening or changing operation. To is the new path of a
// rename or link and a symlink's target.
type Event struct {
	Op, Path, To string
}

// Hook is called before each opening or changing operation; an error
// refuses it, and the caller sees EACCES. Reads of metadata (stat,
// readdir, readlink) are not hooked.
type Hook func(Event) error

// WithHook calls h before p's opening and changing operations.
func WithHook(p Provider, h Hook) Provider {
	if h == nil {
		return p
	}
	return &hooked{Provider: p, h: h}
}

type hooked struct {
	Provider
	h Hook
}

func (k *hooked) check(op, p, to string) error {
	if k.h(Event{Op: op, Path: Clean(p), To: to}) != nil {
		return unix.EACCES
	}
	return nil
}

func (k *hooked) Open(p string, flags int) (File, error) {
	op := OpOpen
	if writing(flags) {
		op = OpWrite
	}
	if err := k.check(op, p, ""); err != nil {
		return nil, err
	}
	return k.Provider.Open(p, flags)
}

func (k *hooked) Create(p string, flags int, mode uint32) (File, error) {
	if err := k.check(OpCreate, p, ""); err != nil {
		return nil, err
	}
	return k.Provider.Create(p, flags, mode)
}

func (k *hooked) Mkdir(p string, mode uint32) error {
	if err := k.check(OpMkdir, p, ""); err != nil {
		return err
	}
	return k.Provider.Mkdir(p, mode)
}

func (k *hooked) Remove(p string) error {
	if err := k.check(OpRemove, p, ""); err != nil {
		return err
	}
	return k.Provider.Remove(p)
}

func (k *hooked) Rename(from, to string) error {
	if err := k.check(OpRename, from, Clean(to)); err != nil {
		return err
	}
	return k.Provider.Rename(from, to)
}

func (k *hooked) Symlink(target, p string) error {
	if err := k.check(OpSymlink, p, target); err != nil {
		return err
	}
	return k.Provider.Symlink(target, p)
}

func (k *hooked) Link(existing, p string) error {
	if err := k.check(OpLink, existing, Clean(p)); err != nil {
		return err
	}
	return k.Provider.Link(existing, p)
}

func (k *hooked) Setattr(p string, a SetAttr) (Attr, error) {
	if err := k.check(OpSetattr, p, ""); err != nil {
		return Attr{}, err
	}
	return k.Provider.Setattr(p, a)
}

// AuditHook returns a Hook that asks deny (nil: allow all) and emits one
// `file` audit record per event, allowed or denied, through emit (which
// decides where records go; the audit log aggregates floods). prefix is
// put before paths, e.g. the mount point in the guest.
func AuditHook(prefix string, emit func(audit.Record), deny func(Event) error) Hook {
	return func(e Event) error {
		var err error
		if deny != nil {
			err = deny(e)
		}
		r := audit.File(e.Op, prefix+e.Path)
		r.Decision = audit.Allow
		if err != nil {
			r.Decision, r.Reason = audit.Deny, err.Error()
		}
		if e.To != "" {
			to := e.To
			if e.Op != OpSymlink {
				to = prefix + to
			}
			r.Extra = map[string]string{"to": to}
		}
		if emit != nil {
			emit(r)
		}
		return err
	}
}
