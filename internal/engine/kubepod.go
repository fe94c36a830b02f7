package engine

// KubePod is where a kubernetes sandbox runs.
type KubePod struct {
	Pod  string `json:"pod"` // namespace/name
	Node string `json:"node,omitempty"`
}
