package workspace

import "fmt"

// scanFunc takes the start manifest (see Prepare's scan).
type scanFunc func(p Progress, workers int, stop <-chan struct{}, begin func() bool) (Partial, error)

// modeImpl is what one workspace mode (bind, overlay, copy) does of its own;
// the Session does the rest the same way for every mode.
type modeImpl interface {
	// prepare readies the mode's side before the sandbox starts and makes
	// the session's start manifest (s.base). rootMode is the workspace's
	// permission bits.
	prepare(s *Session, scan scanFunc, progress Progress, rootMode uint32) error
	// compare reads the sandbox's side and compares it with the start.
	compare(s *Session) ([]Change, error)
	// stop runs once the sandbox has stopped, before the review's compare.
	stop(s *Session, r *Report) error
	// reviewed completes the report once the changes are known.
	reviewed(s *Session, r *Report, cs []Change)
	// record keeps the change set the review found, where the mode keeps it.
	record(s *Session, cs []Change) error
	// changes are the changes still to review (Session.Changes).
	changes(s *Session) ([]Change, error)
	// pends says whether changes wait in the session for apply or discard
	// (the host sees nothing of them until then).
	pends() bool
	// tree is where the sandbox's version of the workspace is on the host.
	tree(s *Session) string
	// before reads what a changed file held at start.
	before(s *Session, c Change) ([]byte, error)
}

// modeOf is the implementation of m.
func modeOf(m Mode) (modeImpl, error) {
	switch m {
	case Bind:
		return bindMode{}, nil
	case Overlay:
		return overlayMode{}, nil
	case Copy:
		return copyMode{}, nil
	}
	return nil, fmt.Errorf("workspace: unknown mode %q", m)
}

// pendingChanges is Changes for a mode whose changes wait in the session:
// none once it is done and its tree is gone, else computed.
func pendingChanges(s *Session) ([]Change, error) {
	if s.m.Status == StatusDone && !s.hasTree() {
		return nil, nil
	}
	return s.compute()
}

// noHooks are the review hooks of a mode whose changes wait in the
// session (overlay, copy): it restores nothing, and its start is the host.
type noHooks struct{}

func (noHooks) stop(*Session, *Report) error         { return nil }
func (noHooks) reviewed(*Session, *Report, []Change) {}
func (noHooks) record(*Session, []Change) error      { return nil }
func (noHooks) pends() bool                          { return true }
func (noHooks) before(s *Session, c Change) ([]byte, error) {
	return readBounded(s.m.Root, c.Path, MaxDiffBytes)
}
