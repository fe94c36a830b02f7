//go:build !linux

package hostexec

// workdirBeneath has no openat2 to use here: symlinks are resolved and the
// result checked (a swap after the check moves the command only within its
// own sandbox's walls).
func (h *handler) workdirBeneath(rel, p string) (string, error) {
	return h.workdirByPath(rel, p)
}
