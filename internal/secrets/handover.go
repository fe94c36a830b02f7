package secrets

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// maxHandover bounds what ReadHandover reads.
const maxHandover = 1 << 20

// handed is a secret as one airlock process hands it to another: its real
// value included, so only ever over a pipe between the two, never stored.
type handed struct {
	Name        string   `json:"name"`
	Hosts       []string `json:"hosts"`
	Placeholder string   `json:"placeholder"`
	InBody      bool     `json:"in_body,omitempty"`
	Git         string   `json:"git,omitempty"`
	Value       []byte   `json:"value"`
}

// WriteHandover writes secs for ReadHandover in another process (a
// detached supervisor), placeholders kept: the sandbox's configuration
// was made with them. A secret that is kept fresh here (a login's token)
// cannot go: its refresher does not.
func WriteHandover(w io.Writer, secs []*Secret) error {
	out := make([]handed, 0, len(secs))
	for _, s := range secs {
		if s.retired != nil {
			return fmt.Errorf("secret %s is a login's token kept fresh by this process: it cannot be handed to a background one", s.Name)
		}
		v := s.val()
		if v == nil {
			return fmt.Errorf("secret %s has no value to hand over", s.Name)
		}
		out = append(out, handed{Name: s.Name, Hosts: s.Hosts, Placeholder: s.Placeholder, InBody: s.InBody, Git: s.Git, Value: v})
	}
	return json.NewEncoder(w).Encode(out)
}

// ReadHandover reads what WriteHandover wrote, checked as New checks.
func ReadHandover(r io.Reader) ([]*Secret, error) {
	var in []handed
	if err := json.NewDecoder(io.LimitReader(r, maxHandover)).Decode(&in); err != nil {
		return nil, fmt.Errorf("secrets: read handover: %w", err)
	}
	var out []*Secret
	for _, h := range in {
		if err := checkName(h.Name); err != nil {
			return nil, fmt.Errorf("secrets: handover: %w", err)
		}
		hs, err := normalizeHosts(h.Hosts)
		if err != nil {
			return nil, fmt.Errorf("secrets: handover %s: %w", h.Name, err)
		}
		if err := checkValue(h.Value); err != nil {
			return nil, fmt.Errorf("secrets: handover %s: %w", h.Name, err)
		}
		if !strings.Contains(h.Placeholder, Marker) || strings.Contains(h.Placeholder, string(h.Value)) {
			return nil, errors.New("secrets: handover " + h.Name + ": not a placeholder")
		}
		out = append(out, &Secret{Name: h.Name, Hosts: hs, Placeholder: h.Placeholder, InBody: h.InBody, Git: h.Git, value: seal(h.Value)})
		clear(h.Value)
	}
	return out, nil
}
