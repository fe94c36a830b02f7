package suggest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/airlock-dev/airlock/internal/config"
)

// Merge adds entries to a project file's text (empty for a new file, made
// for project): each host and endpoint rule to its list, each host command
// to hostexec.commands, under its comment, skipping what the file already
// has. The result is checked as config reads it. It returns the new text
// and how many entries were added.
func Merge(name string, file []byte, project string, entries []Entry) ([]byte, int, error) {
	var doc yaml.Node
	if len(bytes.TrimSpace(file)) > 0 {
		if err := yaml.Unmarshal(file, &doc); err != nil {
			return nil, 0, fmt.Errorf("suggest: read %s: %w", name, err)
		}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
		root := doc.Content[0]
		setKey(root, "version", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: "1"})
		setKey(root, "project", &yaml.Node{Kind: yaml.ScalarNode, Value: project})
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, 0, fmt.Errorf("suggest: %s is not a mapping of keys", name)
	}
	added := 0
	for _, e := range entries {
		sec, key, _ := strings.Cut(e.Key, ".")
		list, err := listAt(root, sec, key)
		if err != nil {
			return nil, 0, fmt.Errorf("suggest: %s: %w", name, err)
		}
		var item *yaml.Node
		if e.Command != nil {
			if hasCommand(list, e.Command.Match) {
				continue
			}
			item = &yaml.Node{Kind: yaml.MappingNode}
			setKey(item, "match", &yaml.Node{Kind: yaml.ScalarNode, Value: e.Command.Match, Style: yaml.SingleQuotedStyle})
			if e.Command.Ask {
				setKey(item, "ask", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
			}
		} else {
			if hasScalar(list, e.Value) {
				continue
			}
			item = &yaml.Node{Kind: yaml.ScalarNode, Value: e.Value}
		}
		item.HeadComment = "# " + e.Comment()
		if list.Style&yaml.FlowStyle != 0 {
			// Block style, so the comment has a line of its own; the flow
			// list's own line comment stays on its key's line.
			list.Style = 0
			if k := keyOf(root, sec, key); k != nil && k.LineComment == "" {
				k.LineComment, list.LineComment = list.LineComment, ""
			}
		}
		list.Content = append(list.Content, item)
		added++
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, 0, fmt.Errorf("suggest: write %s: %w", name, err)
	}
	enc.Close()
	out := b.Bytes()
	if _, err := config.Parse(name, out, config.SourceProject); err != nil {
		return nil, 0, fmt.Errorf("suggest: the merged file would not load: %w", err)
	}
	return out, added, nil
}

// listAt finds (or makes) the sequence at sec.key in root.
func listAt(root *yaml.Node, sec, key string) (*yaml.Node, error) {
	m := getKey(root, sec)
	if m == nil || (m.Kind == yaml.ScalarNode && m.Tag == "!!null") {
		m = &yaml.Node{Kind: yaml.MappingNode}
		setKey(root, sec, m)
	}
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s is not a mapping", sec)
	}
	l := getKey(m, key)
	if l == nil || (l.Kind == yaml.ScalarNode && l.Tag == "!!null") {
		l = &yaml.Node{Kind: yaml.SequenceNode}
		setKey(m, key, l)
	}
	if l.Kind != yaml.SequenceNode {
		return nil, errors.New(sec + "." + key + " is not a list")
	}
	return l, nil
}

// keyOf is the key node of sec.key in root, or nil.
func keyOf(root *yaml.Node, sec, key string) *yaml.Node {
	m := getKey(root, sec)
	if m == nil {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i]
		}
	}
	return nil
}

func getKey(m *yaml.Node, k string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == k {
			return m.Content[i+1]
		}
	}
	return nil
}

// setKey replaces k's value in m, or appends k.
func setKey(m *yaml.Node, k string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == k {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, v)
}

func hasScalar(l *yaml.Node, v string) bool {
	for _, n := range l.Content {
		if n.Kind == yaml.ScalarNode && n.Value == v {
			return true
		}
	}
	return false
}

func hasCommand(l *yaml.Node, match string) bool {
	for _, n := range l.Content {
		if m := getKey(n, "match"); n.Kind == yaml.MappingNode && m != nil && m.Value == match {
			return true
		}
	}
	return false
}

// Diff is a line diff of old and new, with a few lines of context: "-"
// and "+" lines, "  " for context. Files past 2000 lines are shown as the
// lines new adds at its end or not at all in old (config files are short).
func Diff(old, new []byte) string {
	a, b := lines(old), lines(new)
	var out strings.Builder
	if len(a) > 2000 || len(b) > 2000 {
		in := map[string]bool{}
		for _, l := range a {
			in[l] = true
		}
		for _, l := range b {
			if !in[l] {
				out.WriteString("+ " + l + "\n")
			}
		}
		return out.String()
	}
	// Longest common subsequence, then walk it.
	n, m := len(a), len(b)
	lcs := make([][]int32, n+1)
	for i := range lcs {
		lcs[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		c byte
		s string
	}
	var ops []op
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			ops = append(ops, op{' ', a[i]})
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, op{'-', a[i]}) // what goes, before what comes
			i++
		default:
			ops = append(ops, op{'+', b[j]})
			j++
		}
	}
	const ctx = 2
	near := func(k int) bool {
		for d := -ctx; d <= ctx; d++ {
			if k+d >= 0 && k+d < len(ops) && ops[k+d].c != ' ' {
				return true
			}
		}
		return false
	}
	gap := false
	for k, o := range ops {
		if !near(k) {
			gap = true
			continue
		}
		if gap && out.Len() > 0 {
			out.WriteString("  ...\n")
		}
		gap = false
		out.WriteString(string(o.c) + " " + o.s + "\n")
	}
	return out.String()
}

func lines(b []byte) []string {
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
