//go:build !linux

package watch

import "errors"

// Watcher is Linux's alone (inotify); elsewhere New refuses.
type Watcher struct{}

// New refuses off Linux, unless there is nothing to watch.
func New(mounts []Mount, _ func(op, path string, size int64)) (*Watcher, error) {
	if len(mounts) == 0 {
		return nil, nil
	}
	return nil, errors.New("watch: --watch-files needs Linux (inotify)")
}

// Close does nothing.
func (w *Watcher) Close() {}
