// Package watch reports the files a sandbox creates, writes and deletes in
// its writable mounts, from inotify on their host side: the audit stream's
// file events (--watch). It knows no sandbox, only directories.
package watch

// Mount is a writable host dir and where it is inside.
type Mount struct{ Host, Inside string }
