package agents

// Data-only stand-ins for the four npm-installed profiles, so the docker
// image's agents variant (internal/images) has its pinned versions to read
// from All() before the real profiles land. DELETE THIS FILE when merging
// the real profiles: they register the same names, and a duplicate panics
// at init, so the two cannot silently coexist.
func init() {
	for _, p := range []*Profile{
		{Name: "claude", Display: "Claude Code", Package: "@anthropic-ai/claude-code", Version: "2.1.330", Binary: "claude"},
		{Name: "codex", Display: "Codex", Package: "@openai/codex", Version: "0.169.0", Binary: "codex"},
		{Name: "gemini", Display: "Gemini CLI", Package: "@google/gemini-cli", Version: "0.61.0", Binary: "gemini"},
		{Name: "opencode", Display: "OpenCode", Package: "opencode-ai", Version: "1.18.33", Binary: "opencode"},
	} {
		register(p)
	}
}
