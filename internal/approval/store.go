package approval

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"
)

// Store file names, in the directory given to OpenStore.
const (
	StoreFile = "decisions.yaml"
	LockFile  = "decisions.lock"
	// SchemaVersion is the decisions file's version: key.
	SchemaVersion = 1
	// MaxFileSize bounds a decisions file, read or written.
	MaxFileSize = 1 << 20
)

// Store keeps saved decisions (project and global scope) in dir/decisions.yaml,
// apart from hand-written config. Writers take a cross-process flock on
// dir/decisions.lock, re-read the file, change it and replace it atomically,
// so two supervisors never lose each other's decisions; readers see whole
// files only. It is safe for concurrent use.
type Store struct {
	dir  string
	path string
	now  func() time.Time

	mu    sync.Mutex
	rules []Rule
	stamp stamp
	err   error // of the last reload; nil after a good one
}

// stamp identifies a version of the file without reading it.
type stamp struct {
	ino, size int64
	mtime     int64
	exists    bool
}

// OpenStore reads dir/decisions.yaml. A missing file (or dir) is no
// decisions; a malformed one is an error naming the file and line, never
// an empty set, so saved denies are never silently dropped.
func OpenStore(dir string) (*Store, error) {
	s := &Store{dir: dir, path: filepath.Join(dir, StoreFile), now: time.Now}
	rules, st, err := s.load()
	if err != nil {
		return nil, err
	}
	s.rules, s.stamp = rules, st
	return s, nil
}

// Path is the decisions file.
func (s *Store) Path() string { return s.path }

// Rules lists the global rules and those of project, unexpired.
func (s *Store) Rules(project string) []Rule {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Rule
	for _, r := range s.rules {
		if expired(&r, now) || (r.Scope == Project && r.Project != project) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// All lists every saved rule, expired ones included (until the next write
// prunes them), in file order.
func (s *Store) All() []Rule {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Rule(nil), s.rules...)
}

// Err is the error of the last reload by Watch: nil while the file parses.
// While it is not nil the Store keeps the last good rules.
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Add saves r and returns it as stored. r must have a saved scope (Project
// with an absolute Project path, or Global) and a valid host; an empty ID
// gets a fresh one and a zero Created the current time. A rule for the same
// host, scope and project replaces the old one (a new answer supersedes,
// whether it allows or denies). Expired rules are pruned on the way.
func (s *Store) Add(r Rule) (Rule, error) {
	if r.ID == "" {
		r.ID = NewRuleID()
	}
	if r.Created.IsZero() {
		r.Created = s.now().UTC()
	}
	if !r.Scope.Saved() {
		return Rule{}, fmt.Errorf("approval: save %s: scope %q is not saved (project or global)", r.Host, r.Scope)
	}
	if err := validRule(&r); err != nil {
		return Rule{}, fmt.Errorf("approval: save %s: %w", r.Host, err)
	}
	if err := checkRule(r.Host, r.Allow); err != nil {
		return Rule{}, fmt.Errorf("approval: save: %w", err)
	}
	err := s.update(func(rules []Rule) ([]Rule, error) {
		out := rules[:0]
		for _, o := range rules {
			if o.Host == r.Host && o.Scope == r.Scope && o.Project == r.Project {
				continue
			}
			for o.ID == r.ID {
				r.ID = NewRuleID()
			}
			out = append(out, o)
		}
		return append(out, r), nil
	})
	if err != nil {
		return Rule{}, err
	}
	return r, nil
}

// Revoke removes the rule id and returns it; ErrNoRule when there is none.
func (s *Store) Revoke(id string) (Rule, error) {
	var gone Rule
	err := s.update(func(rules []Rule) ([]Rule, error) {
		for i, r := range rules {
			if r.ID == id {
				gone = r
				return append(rules[:i:i], rules[i+1:]...), nil
			}
		}
		return nil, ErrNoRule
	})
	if err != nil {
		return Rule{}, err
	}
	return gone, nil
}

// ErrNoRule is Revoke's answer for an ID no saved rule has.
var ErrNoRule = errors.New("no saved decision has that ID (see airlock approvals --decisions)")

// update runs change on the current file's rules (unexpired) under the
// cross-process lock and writes the result atomically.
func (s *Store) update(change func([]Rule) ([]Rule, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("approval: create %s: %w", s.dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(s.dir, LockFile), os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("approval: open lock: %w", err)
	}
	defer lock.Close()
	for {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("approval: lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // Close unlocks too

	rules, _, err := s.load()
	if err != nil {
		return err // never overwrite a file we could not read: it may hold denies
	}
	now := s.now()
	live := rules[:0]
	for _, r := range rules {
		if !expired(&r, now) {
			live = append(live, r)
		}
	}
	rules, err = change(live)
	if err != nil {
		return err
	}
	data, err := MarshalRules(rules)
	if err != nil {
		return err
	}
	if len(data) > MaxFileSize {
		return fmt.Errorf("approval: %s would exceed %d bytes; revoke some decisions", s.path, MaxFileSize)
	}
	if err := writeAtomic(s.path, data); err != nil {
		return err
	}
	st, _ := statFile(s.path)
	s.rules, s.stamp, s.err = rules, st, nil
	return nil
}

// writeAtomic replaces path with data: a temporary file in the same
// directory, fsync, rename, fsync of the directory.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("approval: write %s: %w", path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("approval: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("approval: fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("approval: close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("approval: rename into %s: %w", path, err)
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// load reads and parses the file; a missing file is no rules.
func (s *Store) load() ([]Rule, stamp, error) {
	f, err := os.Open(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, stamp{}, nil
	}
	if err != nil {
		return nil, stamp{}, fmt.Errorf("approval: %w", err)
	}
	defer f.Close()
	st, err := statOf(f)
	if err != nil {
		return nil, stamp{}, fmt.Errorf("approval: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, stamp{}, fmt.Errorf("approval: read %s: %w", s.path, err)
	}
	rules, err := parseRules(s.path, data, true)
	if err != nil {
		return nil, stamp{}, err
	}
	return rules, st, nil
}

func statOf(f *os.File) (stamp, error) {
	fi, err := f.Stat()
	if err != nil {
		return stamp{}, err
	}
	return stampOf(fi), nil
}

func statFile(path string) (stamp, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return stamp{}, nil
	}
	if err != nil {
		return stamp{}, err
	}
	return stampOf(fi), nil
}

func stampOf(fi os.FileInfo) stamp {
	st := stamp{size: fi.Size(), mtime: fi.ModTime().UnixNano(), exists: true}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = int64(sys.Ino)
	}
	return st
}

// Watch polls the file every interval (inode, size, mtime) until ctx ends
// and reloads it when it changed: changed is called after each successful
// reload by another writer (this Store's own Add and Revoke update its
// rules at once and do not call it). A malformed file keeps the last good
// rules; Err reports it until a good file replaces it.
func (s *Store) Watch(ctx context.Context, every time.Duration, changed func()) {
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.reload() && changed != nil {
			changed()
		}
	}
}

// reload re-reads the file if its stamp changed; it reports whether the
// rules were replaced.
func (s *Store) reload() bool {
	st, err := statFile(s.path)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = fmt.Errorf("approval: %w", err)
		return false
	}
	if st == s.stamp {
		return false
	}
	rules, got, err := s.load()
	if err != nil {
		s.err = err
		s.stamp = st // report once per version; a rewrite is retried
		return false
	}
	s.rules, s.stamp, s.err = rules, got, nil
	return true
}

// The file's form. Field order is the order written.
type fileDoc struct {
	Version   int        `yaml:"version"`
	Decisions []fileRule `yaml:"decisions"`
}

type fileRule struct {
	ID       string `yaml:"id"`
	Host     string `yaml:"host"`
	Decision string `yaml:"decision"`
	Scope    string `yaml:"scope"`
	Project  string `yaml:"project,omitempty"`
	Created  string `yaml:"created,omitempty"`
	Expires  string `yaml:"expires,omitempty"`
	By       string `yaml:"by,omitempty"`
}

// MarshalRules writes rules in the decisions file's form (schema version 1).
func MarshalRules(rules []Rule) ([]byte, error) {
	doc := fileDoc{Version: SchemaVersion, Decisions: make([]fileRule, 0, len(rules))}
	for _, r := range rules {
		fr := fileRule{ID: r.ID, Host: r.Host, Decision: "deny", Scope: string(r.Scope), Project: r.Project, By: r.By}
		if r.Allow {
			fr.Decision = "allow"
		}
		if !r.Created.IsZero() {
			fr.Created = r.Created.UTC().Format(time.RFC3339)
		}
		if !r.Expires.IsZero() {
			fr.Expires = r.Expires.UTC().Format(time.RFC3339)
		}
		doc.Decisions = append(doc.Decisions, fr)
	}
	var b bytes.Buffer
	b.WriteString("# Saved approval decisions, written by airlock: use airlock revoke to remove one.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("approval: encode decisions: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("approval: encode decisions: %w", err)
	}
	return b.Bytes(), nil
}

// ParseRules reads a decisions file (the Store's, or one prepared for a
// headless run with --decisions FILE). Errors carry name and line: unknown
// keys, a missing or unknown version, a bad host, decision, scope or time,
// duplicate IDs. An empty file is no rules. A rule without an id gets one
// derived from its content, so a prepared file's IDs are stable too.
// Scopes: session, project (with an absolute project path) or global.
func ParseRules(name string, data []byte) ([]Rule, error) {
	return parseRules(name, data, false)
}

// parseRules is ParseRules; saved refuses session decisions, which have
// no place in the Store's file.
func parseRules(name string, data []byte, saved bool) ([]Rule, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, MaxFileSize)
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		line := more.Line
		if err != nil {
			return nil, fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
		}
		return nil, fmt.Errorf("%s:%d: a second YAML document; a decisions file is one", name, line)
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		return nil, nil // empty, or comments only
	}
	doc := root.Content[0]
	at := func(n *yaml.Node, format string, a ...any) error {
		return fmt.Errorf("%s:%d: %s", name, n.Line, fmt.Sprintf(format, a...))
	}
	if doc.Kind == yaml.ScalarNode && doc.Tag == "!!null" {
		return nil, nil
	}
	if doc.Kind != yaml.MappingNode {
		return nil, at(doc, "expected a mapping with version: and decisions:")
	}
	var rules []Rule
	version := 0
	var decisions *yaml.Node
	seen := make(map[string]bool)
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		if seen[k.Value] {
			return nil, at(k, "%s given twice", k.Value) // the second would hide the first's decisions
		}
		seen[k.Value] = true
		switch k.Value {
		case "version":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
				return nil, at(v, "version must be a number")
			}
			if v.Value != "1" {
				return nil, at(v, "version %s is not supported (this airlock reads version %d; a newer airlock wrote this file?)", v.Value, SchemaVersion)
			}
			version = SchemaVersion
		case "decisions":
			decisions = v
		default:
			return nil, at(k, "unknown key %q (accepted: version, decisions)", k.Value)
		}
	}
	if version == 0 {
		return nil, at(doc, "missing version: %d", SchemaVersion)
	}
	if decisions == nil || (decisions.Kind == yaml.ScalarNode && decisions.Tag == "!!null") {
		return nil, nil
	}
	if decisions.Kind != yaml.SequenceNode {
		return nil, at(decisions, "decisions must be a list")
	}
	ids := make(map[string]int)
	for _, item := range decisions.Content {
		r, err := parseRule(item, at, saved)
		if err != nil {
			return nil, err
		}
		if line, dup := ids[r.ID]; dup {
			return nil, at(item, "id %s is also used on line %d", r.ID, line)
		}
		ids[r.ID] = item.Line
		rules = append(rules, r)
	}
	return rules, nil
}

func parseRule(n *yaml.Node, at func(*yaml.Node, string, ...any) error, saved bool) (Rule, error) {
	var r Rule
	if n.Kind != yaml.MappingNode {
		return r, at(n, "a decision must be a mapping (id, host, decision, scope, ...)")
	}
	seen := make(map[string]bool)
	decided := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			return r, at(k, "%s given twice", k.Value)
		}
		seen[k.Value] = true
		if v.Kind != yaml.ScalarNode {
			return r, at(v, "%s must be a single value", k.Value)
		}
		var err error
		switch k.Value {
		case "id":
			r.ID = v.Value
			if !validID(r.ID) {
				err = errors.New("id must be r- and 8 hex digits")
			}
		case "host":
			r.Host = v.Value
			err = checkHost(r.Host)
		case "decision":
			switch v.Value {
			case "allow":
				r.Allow = true
			case "deny":
			default:
				err = fmt.Errorf("decision %q is not allow or deny", v.Value)
			}
			decided = true
		case "scope":
			r.Scope = Scope(v.Value)
			switch {
			case saved && !r.Scope.Saved():
				err = fmt.Errorf("scope %q is not project or global (the only saved scopes)", v.Value)
			case r.Scope != Session && !r.Scope.Saved():
				err = fmt.Errorf("scope %q is not session, project or global", v.Value)
			}
		case "project":
			r.Project = v.Value
		case "created":
			r.Created, err = parseTime(k.Value, v.Value)
		case "expires":
			r.Expires, err = parseTime(k.Value, v.Value)
		case "by":
			r.By = v.Value
		default:
			err = fmt.Errorf("unknown key %q (accepted: id, host, decision, scope, project, created, expires, by)", k.Value)
			v = k
		}
		if err != nil {
			return r, at(v, "%v", err)
		}
	}
	switch {
	case r.Host == "":
		return r, at(n, "missing host")
	case !decided:
		return r, at(n, "missing decision: allow or deny")
	case r.Scope == "":
		return r, at(n, "missing scope: session, project or global")
	}
	if err := validRule(&r); err != nil {
		return r, at(n, "%v", err)
	}
	// A prepared file's allow over a public suffix is refused here; one in
	// the Store's file (saved by an older airlock) is left out where rules
	// are used (HostRules, Compile), so the file's denies still load.
	if !saved {
		if err := checkRule(r.Host, r.Allow); err != nil {
			return r, at(n, "%v", err)
		}
	}
	if r.ID == "" {
		h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%t\x00%s\x00%s", r.Host, r.Allow, r.Scope, r.Project)))
		r.ID = "r-" + hex.EncodeToString(h[:4])
	}
	return r, nil
}

// validRule checks what ties fields together.
func validRule(r *Rule) error {
	if err := checkHost(r.Host); err != nil {
		return err
	}
	if r.ID != "" && !validID(r.ID) {
		return fmt.Errorf("id %q is not r- and 8 hex digits", r.ID)
	}
	switch {
	case r.Scope == Project && !filepath.IsAbs(r.Project):
		return errors.New("a project decision needs project: the project's absolute path")
	case r.Scope != Project && r.Project != "":
		return fmt.Errorf("project: is only for scope project, not %s", r.Scope)
	case !r.Expires.IsZero() && !r.Created.IsZero() && !r.Expires.After(r.Created):
		return errors.New("expires is not after created")
	}
	return nil
}

func validID(id string) bool {
	h, ok := strings.CutPrefix(id, "r-")
	if !ok || len(h) != 8 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && strings.ToLower(h) == h
}

func parseTime(key, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q is not a time like 2026-11-23T17:00:00Z", key, s)
	}
	return t.UTC(), nil
}
