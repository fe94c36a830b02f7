package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/secrets"

	"github.com/airlock-dev/airlock/internal/regfile"
)

// MaxFileSize bounds what is read of one config file.
const MaxFileSize = 1 << 20

// Source is where a layer of settings comes from, lowest precedence first.
type Source int

const (
	SourceDefault Source = iota // built in
	SourceGlobal                // ~/.config/airlock/config.yaml
	SourceProject               // the project's file in the config dir
	SourceRepo                  // a trusted .airlock.yaml at the project root
	SourceFlag                  // the command line
)

func (s Source) String() string {
	return [...]string{"default", "global", "project", "repository", "flag"}[s]
}

// Origin is where one value was set.
type Origin struct {
	Source Source `json:"source"`
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Flag   string `json:"flag,omitempty"` // "--memory"
}

// String reads "default", "~/.config/airlock/config.yaml:7" or "flag --memory".
func (o Origin) String() string {
	switch {
	case o.Flag != "":
		return "flag " + o.Flag
	case o.File != "" && o.Line > 0:
		return DisplayPath(o.File) + ":" + strconv.Itoa(o.Line)
	case o.File != "":
		return DisplayPath(o.File)
	}
	return o.Source.String()
}

// MarshalText makes Origins print as strings in JSON.
func (o Origin) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// DisplayPath abbreviates the home directory to ~.
func DisplayPath(p string) string {
	if home, err := os.UserHomeDir(); err == nil && home != "/" && home != "" {
		if rest, ok := strings.CutPrefix(p, home+"/"); ok {
			return "~/" + rest
		}
	}
	return p
}

// Error is a mistake in a config file: ONE line saying where and what was
// expected.
type Error struct {
	File string
	Line int
	Key  string
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(DisplayPath(e.File))
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	if e.Key != "" {
		b.WriteString(": " + e.Key)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// Layer is one source's settings, each with where it was set.
type Layer struct {
	Source Source
	File   string // "" for defaults and flags
	dir    string // relative paths resolve against it
	vals   map[string]*setting
}

// setting is one key's value in a layer: a scalar in v, or list items.
type setting struct {
	v      any // string, bool, int64, float64, time.Duration; a reserved section's decoded YAML
	items  []item
	origin Origin
}

// item is one list entry; key identifies entries a later layer replaces
// (an env var's or a secret's NAME).
type item struct {
	value  string
	key    string
	origin Origin
}

// NewLayer returns an empty layer, e.g. for flags.
func NewLayer(src Source, file string) *Layer {
	l := &Layer{Source: src, File: file, vals: map[string]*setting{}}
	if file != "" {
		l.dir = filepath.Dir(file)
	}
	return l
}

// Set reports whether the layer sets key.
func (l *Layer) Set(key string) bool { _, ok := l.vals[key]; return ok }

// Keys lists the keys the layer sets, sorted.
func (l *Layer) Keys() []string {
	keys := make([]string, 0, len(l.vals))
	for k := range l.vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ReadFile reads and parses a config file of at most MaxFileSize bytes.
// A file that does not exist gives (nil, nil). It is one of the user's
// (in the config dir, out of the sandbox's reach): a symbolic link to it,
// as dotfile managers make, is followed; it must end at a regular file.
func ReadFile(path string, src Source) (*Layer, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path // reported by the read below
	}
	data, err := readCapped(real)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, errNotDir) {
			return nil, nil
		}
		return nil, err
	}
	return Parse(path, data, src)
}

var errNotDir = errors.New("not a directory")

// ErrNotRegular is ReadRegular's answer for a path that is not a regular
// file: a FIFO, a device, a socket, a directory or a symbolic link.
var ErrNotRegular = regfile.ErrNotRegular

// ReadRegular reads the regular file at path, of at most max bytes, in a
// way a sandbox that can write the path cannot turn against the reader:
// a symbolic link as the last component is refused (O_NOFOLLOW), opening
// never blocks (O_NONBLOCK: a FIFO would wait for a writer), and what was
// opened is checked with fstat to be a regular file before a byte is read.
// Errors wrap ErrNotRegular, fs.ErrNotExist or the read's error; a larger
// file is an error, never silently cut.
func ReadRegular(path string, max int64) ([]byte, error) {
	return regfile.Read(path, max, false)
}

// readCapped reads a config file with ReadRegular; what is not a regular
// file, or is too large, is an *Error naming the file.
func readCapped(path string) ([]byte, error) {
	data, err := ReadRegular(path, MaxFileSize)
	if err == nil {
		return data, nil
	}
	if pe := (*os.PathError)(nil); errors.As(err, &pe) && errors.Is(pe.Err, syscall.ENOTDIR) {
		return nil, errNotDir
	}
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
		return nil, err
	}
	if errors.Is(err, ErrNotRegular) {
		msg := strings.TrimPrefix(err.Error(), path+": ")
		msg = strings.TrimSuffix(msg, ": "+ErrNotRegular.Error())
		return nil, &Error{File: path, Msg: msg + ", not a config file"}
	}
	if strings.Contains(err.Error(), "larger than") {
		return nil, &Error{File: path, Msg: fmt.Sprintf("larger than %d bytes; a config file is a few lines", MaxFileSize)}
	}
	return nil, &Error{File: path, Msg: err.Error()}
}

// Parse reads one config file's text. name is its path: errors and origins
// name it, and relative paths in it resolve against its directory.
func Parse(name string, data []byte, src Source) (*Layer, error) {
	l := NewLayer(src, name)
	if len(data) > MaxFileSize {
		return nil, &Error{File: name, Msg: fmt.Sprintf("larger than %d bytes; a config file is a few lines", MaxFileSize)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg, line := err.Error(), 0
		if rest, ok := strings.CutPrefix(msg, "yaml: line "); ok {
			if n, text, ok := strings.Cut(rest, ": "); ok {
				if line, err = strconv.Atoi(n); err == nil {
					msg = text
				}
			}
		}
		msg = strings.TrimPrefix(msg, "yaml: ")
		return nil, &Error{File: name, Line: line, Msg: "syntax error: " + msg}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return l, nil // empty, or only comments
	}
	root := doc.Content[0]
	if isNull(root) {
		return l, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: name, Line: root.Line, Msg: "expected a mapping of keys such as network: or limits: at the top level"}
	}
	p := parser{l: l}
	if err := p.mapping("", root); err != nil {
		return nil, err
	}
	return l, nil
}

type parser struct{ l *Layer }

func (p *parser) errorf(n *yaml.Node, key, format string, a ...any) error {
	return &Error{File: p.l.File, Line: n.Line, Key: key, Msg: fmt.Sprintf(format, a...)}
}

func (p *parser) origin(n *yaml.Node) Origin {
	return Origin{Source: p.l.Source, File: p.l.File, Line: n.Line}
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// deref follows an alias to what it names.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; i < 8 && n.Kind == yaml.AliasNode && n.Alias != nil; i++ {
		n = n.Alias
	}
	return n
}

func join(section, name string) string {
	if section == "" {
		return name
	}
	return section + "." + name
}

func (p *parser) mapping(section string, n *yaml.Node) error {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			return p.errorf(k, section, "keys must be plain names (anchors and << merges are not supported here)")
		}
		key := join(section, k.Value)
		if first, dup := seen[k.Value]; dup {
			return p.errorf(k, key, "set twice (first on line %d)", first)
		}
		seen[k.Value] = k.Line
		f := lookup(key)
		if f == nil {
			msg := "unknown key"
			if s := suggest(section, k.Value, children(section)); s != "" {
				msg += " (did you mean " + s + "?)"
			} else {
				msg += "; known keys here: " + strings.Join(children(section), ", ")
			}
			return p.errorf(k, key, "%s", msg)
		}
		if f.key == "agents.*" && !validAgentName(k.Value) {
			return p.errorf(k, key, "not an agent's name: use lower-case letters, digits and -, such as claude (or default: NAME)")
		}
		if err := p.value(f, key, k, v); err != nil {
			return err
		}
	}
	return nil
}

// validAgentName reports whether n looks like an agent's name in the
// agents section: a lower-case letter, then up to 31 lower-case letters,
// digits and -. (No regular expression: this package's init is every
// airlock start's, the guest's too.)
func validAgentName(n string) bool {
	if n == "" || len(n) > 32 || n[0] < 'a' || n[0] > 'z' {
		return false
	}
	for i := 1; i < len(n); i++ {
		if c := n[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// scalar returns n's text if it is a scalar of one of tags.
func scalar(n *yaml.Node, tags ...string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		return "", false
	}
	for _, t := range tags {
		if n.Tag == t {
			return n.Value, true
		}
	}
	return "", false
}

// value reads key's value v; f is key's schema entry (agents.*.hosts for
// agents.claude.hosts).
func (p *parser) value(f *field, key string, k, v *yaml.Node) error {
	if isNull(v) {
		return nil // "key:" with nothing sets nothing
	}
	if f.kind == kSection {
		// "approvals: ask" is short for "approvals: {mode: ask}".
		if m := lookup(key + ".mode"); key == "approvals" && v.Kind == yaml.ScalarNode {
			return p.value(m, key+".mode", k, v)
		}
		if v.Kind != yaml.MappingNode {
			return p.errorf(v, key, "%s (%s)", f.expected(), strings.Join(children(key), ", "))
		}
		return p.mapping(key, v)
	}
	s := &setting{origin: p.origin(k)}
	bad := func() error { return p.errorf(v, key, "%s", f.expected()) }
	switch f.kind {
	case kString:
		t, ok := scalar(v, "!!str", "!!int", "!!float")
		if !ok {
			return bad()
		}
		s.v = t
	case kEnum:
		t, ok := scalar(v, "!!str")
		if !ok {
			return bad()
		}
		if !contains(f.enum, t) {
			return p.errorf(v, key, "unknown value %q: %s", t, f.expected())
		}
		s.v = t
	case kBool:
		t, ok := scalar(v, "!!bool")
		if !ok {
			return bad()
		}
		s.v, _ = strconv.ParseBool(t)
	case kInt:
		t, ok := scalar(v, "!!int")
		if !ok {
			return bad()
		}
		n, err := strconv.ParseInt(t, 0, 64)
		if err != nil || n < 0 {
			return p.errorf(v, key, "%q: %s, not negative", t, f.expected())
		}
		if key == "version" && n != 1 {
			return p.errorf(v, key, "version %d is not one this airlock reads: use version: 1 (or a newer airlock)", n)
		}
		s.v = n
	case kFloat:
		t, ok := scalar(v, "!!int", "!!float")
		if !ok {
			return bad()
		}
		x, err := strconv.ParseFloat(t, 64)
		if err != nil || x < 0 {
			return p.errorf(v, key, "%q: %s, not negative", t, f.expected())
		}
		s.v = x
	case kSize:
		if t, ok := scalar(v, "!!int"); ok {
			n, err := strconv.ParseInt(t, 0, 64)
			if err != nil || n <= 0 {
				return p.errorf(v, key, "%q: %s", t, f.expected())
			}
			s.v = n
			break
		}
		t, ok := scalar(v, "!!str")
		if !ok {
			return bad()
		}
		n, err := ParseSize(t)
		if err != nil {
			return p.errorf(v, key, "%v", err)
		}
		s.v = n
	case kDuration:
		t, ok := scalar(v, "!!str")
		if !ok {
			return p.errorf(v, key, "%s (a number needs a unit: s, m or h)", f.expected())
		}
		d, err := time.ParseDuration(t)
		if err != nil || d < 0 {
			return p.errorf(v, key, "%q: %s", t, f.expected())
		}
		s.v = d
	case kPath:
		t, ok := scalar(v, "!!str")
		if !ok || t == "" {
			return bad()
		}
		abs, err := p.path(t)
		if err != nil {
			return p.errorf(v, key, "%v", err)
		}
		s.v = abs
	case kList, kPathList:
		nodes, ok := seq(v)
		if !ok {
			return bad()
		}
		if key == tunnelKey && p.l.vals[key] != nil {
			s.items = p.l.vals[key].items // allow_hosts' {intercept: false} entries came first
		}
		for _, n := range nodes {
			if key == "network.allow_hosts" && n.Kind == yaml.MappingNode {
				host, tunnel, err := p.hostEntry(n)
				if err != nil {
					return err
				}
				it := item{value: host, origin: p.origin(n)}
				if !tunnel {
					s.items = append(s.items, it)
					continue
				}
				ts := p.l.vals[tunnelKey]
				if ts == nil {
					ts = &setting{origin: p.origin(n)}
					p.l.vals[tunnelKey] = ts
				}
				ts.items = append(ts.items, it)
				continue
			}
			t, ok := scalar(n, "!!str", "!!int")
			if !ok || t == "" {
				return p.errorf(n, key, "%s", f.expected())
			}
			if f.kind == kPathList {
				var err error
				if t, err = p.path(t); err != nil {
					return p.errorf(n, key, "%v", err)
				}
			}
			ck := key
			if f.wild() && f.host {
				ck = "network.allow_hosts" // an agent's hosts are allow rules
			}
			if err := checkItem(ck, t); err != nil {
				return p.errorf(n, key, "%q: %v", t, err)
			}
			s.items = append(s.items, item{value: t, origin: p.origin(n)})
		}
	case kEnv:
		if err := p.env(s, key, v); err != nil {
			return err
		}
	case kSecrets:
		nodes, ok := seq(v)
		if !ok {
			return bad()
		}
		for i, n := range nodes {
			it, err := p.secret(fmt.Sprintf("%s[%d]", key, i), deref(n))
			if err != nil {
				return err
			}
			s.items = append(s.items, it)
		}
	case kCommands:
		nodes, ok := seq(v)
		if !ok {
			return bad()
		}
		for i, n := range nodes {
			it, err := p.command(fmt.Sprintf("%s[%d]", key, i), n)
			if err != nil {
				return err
			}
			s.items = append(s.items, it)
		}
	case kPrices:
		if v.Kind != yaml.MappingNode {
			return bad()
		}
		prices := map[string]Price{}
		for i := 0; i+1 < len(v.Content); i += 2 {
			g, pv := v.Content[i], deref(v.Content[i+1])
			glob, ok := scalar(g, "!!str")
			if !ok || glob == "" {
				return p.errorf(g, key, "a model name or glob such as claude-sonnet-*")
			}
			if _, err := path.Match(glob, ""); err != nil {
				return p.errorf(g, key, "%q: not a valid glob: %v", glob, err)
			}
			pr, err := p.price(key+"."+glob, pv)
			if err != nil {
				return err
			}
			prices[glob] = pr
		}
		s.v = prices
	case kRaw:
		var x any
		if err := v.Decode(&x); err != nil {
			return p.errorf(v, key, "%v", err)
		}
		s.v = jsonSafe(x)
	}
	p.l.vals[key] = s
	return nil
}

const tunnelKey = "network.tunnel_hosts"

// hostEntry reads an allow_hosts entry written as {host: HOST, intercept:
// BOOL}: intercept: false makes HOST a tunnel host (network.tunnel_hosts).
func (p *parser) hostEntry(n *yaml.Node) (host string, tunnel bool, err error) {
	const key = "network.allow_hosts"
	intercept := true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		switch k.Value {
		case "host":
			t, ok := scalar(v, "!!str")
			if !ok || t == "" {
				return "", false, p.errorf(v, key+".host", "expected a host such as example.com")
			}
			host = t
		case "intercept":
			t, ok := scalar(v, "!!bool")
			if !ok {
				return "", false, p.errorf(v, key+".intercept", "expected true or false")
			}
			intercept, _ = strconv.ParseBool(t)
		default:
			return "", false, p.errorf(k, key+"."+k.Value, "unknown key; an allow_hosts entry has host and intercept")
		}
	}
	if host == "" {
		return "", false, p.errorf(n, key, "an entry without host: write {host: example.com, intercept: false}")
	}
	k := key
	if !intercept {
		k = tunnelKey
	}
	if err := checkItem(k, host); err != nil {
		return "", false, p.errorf(n, key, "%q: %v", host, err)
	}
	return host, !intercept, nil
}

// command reads one hostexec.commands entry: {match, ask, allow_hosts,
// secrets, ro, rw, ssh_agent}. Errors name the entry by its match; nothing
// here reads a secret's value or a path (that happens when a sandbox
// starts, where a failing one stops it).
func (p *parser) command(key string, n *yaml.Node) (item, error) {
	if n.Kind != yaml.MappingNode {
		return item{}, p.errorf(n, key, "expected a mapping such as {match: '^git push( |$)', allow_hosts: [github.com]}")
	}
	var c HostCommand
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Value == "match" {
			c.Match, _ = scalar(deref(n.Content[i+1]), "!!str")
		}
	}
	if c.Match == "" {
		return item{}, p.errorf(n, key, "no match: give a regular expression over the command line, e.g. match: '^git push( |$)'")
	}
	if _, err := regexp.Compile(c.Match); err != nil {
		return item{}, p.errorf(n, key+".match", "%q: not a regular expression: %v", c.Match, err)
	}
	key = fmt.Sprintf("%s (%s)", key, c.Match)
	strs := func(k string, v *yaml.Node, each func(*yaml.Node, string) (string, error)) ([]string, error) {
		nodes, ok := seq(v)
		if !ok {
			return nil, p.errorf(v, key+"."+k, "expected a list")
		}
		var out []string
		for _, e := range nodes {
			t, ok := scalar(e, "!!str")
			if e.Kind == yaml.MappingNode && k == "secrets" {
				it, err := p.secret(key+".secrets", e)
				if err != nil {
					return nil, err
				}
				out = append(out, it.value)
				continue
			}
			if !ok || t == "" {
				return nil, p.errorf(e, key+"."+k, "expected a string")
			}
			t, err := each(e, t)
			if err != nil {
				return nil, err
			}
			out = append(out, t)
		}
		return out, nil
	}
	flag := func(k string, v *yaml.Node) (bool, error) {
		t, ok := scalar(v, "!!bool")
		if !ok {
			return false, p.errorf(v, key+"."+k, "expected true or false")
		}
		b, _ := strconv.ParseBool(t)
		return b, nil
	}
	path := func(e *yaml.Node, t string) (string, error) {
		abs, err := p.path(t)
		if err != nil {
			return "", p.errorf(e, key, "%v", err)
		}
		return abs, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if seen[k.Value] {
			return item{}, p.errorf(k, key+"."+k.Value, "set twice")
		}
		seen[k.Value] = true
		var err error
		switch k.Value {
		case "match":
		case "ask":
			c.Ask, err = flag(k.Value, v)
		case "ssh_agent":
			c.SSHAgent, err = flag(k.Value, v)
		case "allow_hosts":
			c.AllowHosts, err = strs(k.Value, v, func(e *yaml.Node, t string) (string, error) {
				if err := checkItem("network.allow_hosts", t); err != nil {
					return "", p.errorf(e, key+".allow_hosts", "%q: %v", t, err)
				}
				return t, nil
			})
		case "secrets":
			var flags []string
			flags, err = strs(k.Value, v, func(e *yaml.Node, t string) (string, error) {
				if err := CheckSecret(t); err != nil {
					return "", p.errorf(e, key+".secrets", "%v", err)
				}
				return t, nil
			})
			for _, f := range flags {
				sp, perr := secrets.ParseSpec(f) // checked above (or made by p.secret)
				if perr != nil {
					return item{}, p.errorf(v, key+".secrets", "%v", perr)
				}
				c.Secrets = append(c.Secrets, sp)
			}
		case "ro":
			c.RO, err = strs(k.Value, v, path)
		case "rw":
			c.RW, err = strs(k.Value, v, path)
		default:
			msg := "unknown key"
			if s := suggest("", k.Value, commandKeys); s != "" && contains(commandKeys, s) {
				msg += " (did you mean " + s + "?)"
			} else {
				msg += "; a host command has " + strings.Join(commandKeys, ", ")
			}
			return item{}, p.errorf(k, key+"."+k.Value, "%s", msg)
		}
		if err != nil {
			return item{}, err
		}
	}
	b, err := json.Marshal(c)
	if err != nil {
		return item{}, p.errorf(n, key, "%v", err)
	}
	return item{value: string(b), origin: p.origin(n)}, nil
}

// price reads {input, output, cache_read, cache_write}: USD per million tokens.
func (p *parser) price(key string, n *yaml.Node) (Price, error) {
	var pr Price
	if n.Kind != yaml.MappingNode {
		return pr, p.errorf(n, key, "expected a mapping of input, output, cache_read, cache_write (USD per million tokens)")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		var dst *float64
		switch k.Value {
		case "input":
			dst = &pr.Input
		case "output":
			dst = &pr.Output
		case "cache_read":
			dst = &pr.CacheRead
		case "cache_write":
			dst = &pr.CacheWrite
		default:
			return pr, p.errorf(k, key+"."+k.Value, "unknown key; known keys here: input, output, cache_read, cache_write")
		}
		t, ok := scalar(v, "!!int", "!!float")
		x, err := strconv.ParseFloat(t, 64)
		if !ok || err != nil || x < 0 {
			return pr, p.errorf(v, key+"."+k.Value, "expected a non-negative number of USD per million tokens")
		}
		*dst = x
	}
	return pr, nil
}

// seq returns a sequence's items; a lone scalar is a list of one.
func seq(n *yaml.Node) ([]*yaml.Node, bool) {
	switch n.Kind {
	case yaml.SequenceNode:
		out := make([]*yaml.Node, len(n.Content))
		for i, c := range n.Content {
			out[i] = deref(c)
		}
		return out, true
	case yaml.ScalarNode:
		return []*yaml.Node{n}, true
	}
	return nil, false
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// path expands ~/ and makes t absolute against the file's directory.
func (p *parser) path(t string) (string, error) {
	if t == "~" || strings.HasPrefix(t, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("%q: cannot expand ~: %v", t, err)
		}
		t = filepath.Join(home, strings.TrimPrefix(t, "~"))
	}
	if !filepath.IsAbs(t) {
		t = filepath.Join(p.l.dir, t)
	}
	return filepath.Clean(t), nil
}

// checkItem checks one list entry whose form is known without I/O.
func checkItem(key, t string) error {
	switch key {
	case "network.allow_hosts":
		_, err := policy.New(policy.Config{AllowHosts: []string{t}})
		return stripPolicy(err)
	case "network.tunnel_hosts":
		_, err := policy.New(policy.Config{Tunnels: []string{t}})
		return stripPolicy(err)
	case "network.deny_hosts":
		_, err := policy.New(policy.Config{DenyHosts: []string{t}})
		return stripPolicy(err)
	case "network.endpoints":
		_, err := policy.New(policy.Config{Endpoints: []string{t}})
		return stripPolicy(err)
	case "ports":
		if _, err := ParsePublished(t); err != nil {
			return errors.New(strings.TrimPrefix(err.Error(), strconv.Quote(t)+": "))
		}
	case "network.add_hosts":
		name, ip, ok := strings.Cut(t, ":")
		if !ok || name == "" {
			return errors.New("expected NAME:IP")
		}
		if _, err := netip.ParseAddr(strings.Trim(ip, "[]")); err != nil {
			return errors.New("expected NAME:IP, with an IP address after the colon")
		}
	}
	return nil
}

// stripPolicy keeps the reason of a policy error, not its quoting of the rule.
func stripPolicy(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if _, rest, ok := strings.Cut(msg, `": `); ok {
		msg = rest
	}
	return errors.New(msg)
}

// validHeaderName: an HTTP header name as collectors' tokens use them.
func validHeaderName(n string) bool {
	if n == "" || len(n) > 256 {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c == '_' || c == '-' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func validEnvName(n string) bool {
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func (p *parser) env(s *setting, key string, v *yaml.Node) error {
	add := func(n *yaml.Node, name, entry string) error {
		if f := lookup(key); f != nil && f.secret {
			// Header names: a bare name takes nothing from the host here.
			if !validHeaderName(name) || !strings.Contains(entry, "=") {
				return p.errorf(n, key, "%q: use HEADER: VALUE, a header name of letters, digits, - and _", name)
			}
			s.items = append(s.items, item{value: entry, key: strings.ToLower(name), origin: p.origin(n)})
			return nil
		}
		if !validEnvName(name) {
			return p.errorf(n, key, "%q is not a variable name: use letters, digits and _, not starting with a digit", name)
		}
		s.items = append(s.items, item{value: entry, key: name, origin: p.origin(n)})
		return nil
	}
	if v.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(v.Content); i += 2 {
			k, val := v.Content[i], deref(v.Content[i+1])
			t, ok := scalar(val, "!!str", "!!int", "!!float", "!!bool")
			if !ok {
				return p.errorf(val, key+"."+k.Value, "expected a value (a string)")
			}
			if err := add(k, k.Value, k.Value+"="+t); err != nil {
				return err
			}
		}
		return nil
	}
	nodes, ok := seq(v)
	if !ok {
		return p.errorf(v, key, "expected a list of NAME or NAME=VALUE, or a mapping NAME: VALUE")
	}
	for _, n := range nodes {
		t, ok := scalar(n, "!!str")
		if !ok {
			return p.errorf(n, key, "expected NAME or NAME=VALUE")
		}
		name, _, _ := strings.Cut(t, "=")
		if err := add(n, name, t); err != nil {
			return err
		}
	}
	return nil
}

// secret reads one secret: a --secret string, or a mapping
// {name, from, env|file|command, hosts, body, prefix}, into --secret form.
// Nothing here reads the value: that happens when the sandbox starts.
func (p *parser) secret(key string, n *yaml.Node) (item, error) {
	var flag, name string
	switch n.Kind {
	case yaml.ScalarNode:
		t, ok := scalar(n, "!!str")
		if !ok {
			return item{}, p.errorf(n, key, "expected a mapping {name, from, hosts} or --secret's form %s", secrets.FlagSyntax)
		}
		flag = t
		name = secretName(t)
	case yaml.MappingNode:
		m := map[string]*yaml.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], deref(n.Content[i+1])
			if !contains(secretKeys, k.Value) {
				msg := "unknown key"
				if s := suggest("", k.Value, secretKeys); s != "" && contains(secretKeys, s) {
					msg += " (did you mean " + s + "?)"
				} else {
					msg += "; a secret has " + strings.Join(secretKeys, ", ")
				}
				return item{}, p.errorf(k, key+"."+k.Value, "%s", msg)
			}
			if _, dup := m[k.Value]; dup {
				return item{}, p.errorf(k, key+"."+k.Value, "set twice")
			}
			m[k.Value] = v
		}
		str := func(k string) (string, *yaml.Node, error) {
			v := m[k]
			if v == nil || isNull(v) {
				return "", nil, nil
			}
			t, ok := scalar(v, "!!str")
			if !ok || t == "" {
				return "", v, p.errorf(v, key+"."+k, "expected a string")
			}
			return t, v, nil
		}
		var err error
		if name, _, err = str("name"); err != nil {
			return item{}, err
		}
		if name == "" {
			return item{}, p.errorf(n, key, "no name: give the variable the sandbox sees, e.g. name: API_KEY")
		}
		if !validEnvName(name) {
			return item{}, p.errorf(m["name"], key+".name", "not a variable name: use letters, digits and _, not starting with a digit")
		}
		key = key + " (" + name + ")"
		from, fromNode, err := str("from")
		if err != nil {
			return item{}, err
		}
		srcs := map[string]string{}
		for _, k := range []string{"env", "file", "command"} {
			t, _, err := str(k)
			if err != nil {
				return item{}, err
			}
			if t != "" {
				srcs[k] = t
			}
		}
		if an := m["github_app"]; an != nil && !isNull(an) {
			t, err := p.githubApp(key+".github_app", an)
			if err != nil {
				return item{}, err
			}
			srcs["github_app"] = t
		}
		if from == "cmd" {
			from = "command"
		}
		switch {
		case from == "" && len(srcs) == 1:
			for k := range srcs {
				from = k
			}
		case from == "" && len(srcs) == 0:
			from = "env"
		case from == "":
			return item{}, p.errorf(n, key, "more than one of env, file, command and github_app: say which with from: env|file|command|github_app")
		case !contains([]string{"env", "file", "command", "github_app"}, from):
			return item{}, p.errorf(fromNode, key+".from", "unknown value %q: use env, file, command or github_app", from)
		}
		for k := range srcs {
			if k != from {
				return item{}, p.errorf(m[k], key+"."+k, "set, but the secret is from: %s", from)
			}
		}
		flag = name
		switch arg := srcs[from]; from {
		case "env":
			if arg != "" && arg != name {
				flag += "=env:" + arg
			}
		case "file":
			if arg == "" {
				return item{}, p.errorf(n, key, "from: file needs file: PATH")
			}
			if arg, err = p.path(arg); err != nil {
				return item{}, p.errorf(m["file"], key+".file", "%v", err)
			}
			flag += "=file:" + arg
		case "command":
			if arg == "" {
				return item{}, p.errorf(n, key, "from: command needs command: COMMAND")
			}
			flag += "=cmd:" + arg
		case "github_app":
			if arg == "" {
				return item{}, p.errorf(n, key, "from: github_app needs github_app: {app_id, installation_id, private_key, repositories}")
			}
			flag += "=github-app:" + arg
		}
		hn := m["hosts"]
		if hn == nil || isNull(hn) {
			return item{}, p.errorf(n, key, "no hosts: name the hosts the value may go to, e.g. hosts: [api.example.com]")
		}
		hosts, ok := seq(hn)
		if !ok {
			return item{}, p.errorf(hn, key+".hosts", "expected a list of hosts")
		}
		var hs []string
		for _, h := range hosts {
			t, ok := scalar(h, "!!str")
			if !ok || t == "" || strings.ContainsAny(t, "@,") {
				return item{}, p.errorf(h, key+".hosts", "expected a host name such as api.example.com")
			}
			hs = append(hs, t)
		}
		flag += "@" + strings.Join(hs, ",")
		if b := m["body"]; b != nil && !isNull(b) {
			t, ok := scalar(b, "!!bool")
			if !ok {
				return item{}, p.errorf(b, key+".body", "expected true or false")
			}
			if t == "true" {
				flag += ":body"
			}
		}
		pre, _, err := str("prefix")
		if err != nil {
			return item{}, err
		}
		if pre != "" {
			flag += ":prefix=" + pre
		}
		if g := m["git"]; g != nil && !isNull(g) {
			if t, ok := scalar(g, "!!bool"); ok {
				if t == "true" {
					flag += ":git"
				}
			} else if t, ok := scalar(g, "!!str"); ok && t != "" {
				flag += ":git=" + t
			} else {
				return item{}, p.errorf(g, key+".git", "expected true, or the user name git sends (e.g. oauth2)")
			}
		}
	default:
		return item{}, p.errorf(n, key, "expected a mapping {name, from, hosts}")
	}
	if err := CheckSecret(flag); err != nil {
		return item{}, p.errorf(n, key, "%v", err)
	}
	return item{value: flag, key: name, origin: p.origin(n)}, nil
}

// githubApp reads a secret's github_app mapping into the github-app:
// source's text (app=ID;installation=ID;key=PATH;repos=...;permissions=...;api=URL).
func (p *parser) githubApp(key string, n *yaml.Node) (string, error) {
	if n.Kind != yaml.MappingNode {
		return "", p.errorf(n, key, "expected a mapping {app_id, installation_id, private_key, repositories, permissions, api}")
	}
	m := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if !contains(appKeys, k.Value) {
			return "", p.errorf(k, key+"."+k.Value, "unknown key; github_app has %s", strings.Join(appKeys, ", "))
		}
		if _, dup := m[k.Value]; dup {
			return "", p.errorf(k, key+"."+k.Value, "set twice")
		}
		m[k.Value] = v
	}
	// Values may not hold the source's separators; the minter checks the rest.
	plain := func(k string, v *yaml.Node, tags ...string) (string, error) {
		t, ok := scalar(v, tags...)
		if !ok || t == "" || strings.ContainsAny(t, ";,=@\n") {
			return "", p.errorf(v, key+"."+k, "expected a value without ; , = or @")
		}
		return t, nil
	}
	var parts []string
	for _, k := range []string{"app_id", "installation_id", "private_key"} {
		v := m[k]
		if v == nil || isNull(v) {
			return "", p.errorf(n, key, "no %s: github_app needs app_id, installation_id, private_key and repositories", k)
		}
		t, err := plain(k, v, "!!int", "!!str")
		if err != nil {
			return "", err
		}
		if k == "private_key" {
			if t, err = p.path(t); err != nil {
				return "", p.errorf(v, key+"."+k, "%v", err)
			}
			if strings.ContainsAny(t, ";,=@") {
				return "", p.errorf(v, key+"."+k, "a path without ; , = or @")
			}
		}
		parts = append(parts, map[string]string{"app_id": "app", "installation_id": "installation", "private_key": "key"}[k]+"="+t)
	}
	var repos []*yaml.Node
	ok := false
	if rn := m["repositories"]; rn != nil && !isNull(rn) {
		repos, ok = seq(rn)
	}
	if !ok || len(repos) == 0 {
		return "", p.errorf(n, key, "no repositories: list the repositories the token may reach, e.g. repositories: [org/repo]")
	}
	var rs []string
	for _, r := range repos {
		t, err := plain("repositories", r, "!!str")
		if err != nil {
			return "", err
		}
		rs = append(rs, t)
	}
	parts = append(parts, "repos="+strings.Join(rs, ","))
	if pn := m["permissions"]; pn != nil && !isNull(pn) {
		if pn.Kind != yaml.MappingNode {
			return "", p.errorf(pn, key+".permissions", "expected a mapping such as {contents: write}")
		}
		var ps []string
		for i := 0; i+1 < len(pn.Content); i += 2 {
			name, err := plain("permissions", pn.Content[i], "!!str")
			if err != nil {
				return "", err
			}
			acc, err := plain("permissions."+name, deref(pn.Content[i+1]), "!!str")
			if err != nil {
				return "", err
			}
			ps = append(ps, name+":"+acc)
		}
		parts = append(parts, "permissions="+strings.Join(ps, ","))
	}
	if an := m["api"]; an != nil && !isNull(an) {
		t, ok := scalar(an, "!!str")
		if !ok || !strings.HasPrefix(t, "https://") || strings.ContainsAny(t, ";,@ ") {
			return "", p.errorf(an, key+".api", "expected an https:// URL such as https://api.github.com")
		}
		parts = append(parts, "api="+t)
	}
	return strings.Join(parts, ";"), nil
}

// secretName is a --secret flag's NAME.
func secretName(flag string) string {
	at := strings.LastIndexByte(flag, '@')
	if at < 0 {
		at = len(flag)
	}
	name, _, _ := strings.Cut(flag[:at], "=")
	return name
}

// CheckSecret checks a secret in --secret form without reading its value.
func CheckSecret(flag string) error {
	_, err := secrets.ParseSpec(flag)
	if err != nil {
		msg := err.Error()
		if i := strings.Index(msg, ": "); strings.HasPrefix(msg, "--secret") && i >= 0 {
			msg = msg[i+2:]
		}
		return errors.New(msg)
	}
	return nil
}

// jsonSafe turns YAML's map[any]any into map[string]any, so a reserved
// section survives encoding/json in the spec.
func jsonSafe(x any) any {
	switch v := x.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = jsonSafe(e)
		}
		return v
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = jsonSafe(e)
		}
		return m
	case []any:
		for i, e := range v {
			v[i] = jsonSafe(e)
		}
		return v
	}
	return x
}

// ParseSize reads 512m, 4g, 1.5G, 2GiB or 1048576 (bytes).
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 || v*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("%q: use a size such as 512m or 4g", s)
	}
	if mult == 1 && v < 1<<20 {
		return 0, fmt.Errorf("%q is %d bytes; did you mean %sm?", s, int64(v), s)
	}
	return int64(v * float64(mult)), nil
}

// FormatSize writes n as ParseSize reads it, exactly.
func FormatSize(n int64) string {
	for _, u := range []struct {
		s string
		m int64
	}{{"t", 1 << 40}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}} {
		if n >= u.m && n%u.m == 0 {
			return strconv.FormatInt(n/u.m, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

// CheckTunnels refuses tunnel hosts that a secret or an endpoint rule also
// covers: a blind tunnel cannot swap a placeholder or see a request.
func (n Network) CheckTunnels() error {
	if len(n.TunnelHosts) == 0 {
		return nil
	}
	var ss []*secrets.Secret
	for _, f := range n.Secrets {
		ss = append(ss, &secrets.Secret{Name: f.Name, Hosts: f.Hosts})
	}
	errs := []error{CheckTunnelSecrets(n.TunnelHosts, ss)}
	for _, t := range n.TunnelHosts {
		if slices.Contains(n.AllowHosts, t) {
			errs = append(errs, fmt.Errorf("network: %s is in allow_hosts both intercepted and with intercept: false; keep one", t))
		}
	}
	if _, err := policy.New(policy.Config{AllowHosts: n.AllowHosts, Tunnels: n.TunnelHosts, Endpoints: n.Endpoints}); err != nil {
		errs = append(errs, fmt.Errorf("network.tunnel_hosts: %w", err))
	}
	return errors.Join(errs...)
}

// CheckTunnelSecrets refuses secrets that go to a tunnel host; CheckTunnels
// checks n.Secrets with it, and callers holding secrets by value (the API)
// check theirs.
func CheckTunnelSecrets(tunnels []string, ss []*secrets.Secret) error {
	var errs []error
	for _, s := range ss {
		for _, h := range s.Hosts {
			for _, t := range tunnels {
				if policy.Overlaps(t, h) {
					errs = append(errs, fmt.Errorf("network.tunnel_hosts: %s is a blind tunnel (intercept: false), but secret %s goes to %s: a tunnel cannot swap secrets in; intercept the host or drop the secret", t, s.Name, h))
				}
			}
		}
	}
	return errors.Join(errs...)
}
