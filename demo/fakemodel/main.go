// Command fakemodel is the demo's stand-in for an LLM provider: Anthropic's
// Messages API (and OpenAI's and Gemini's) on loopback under the real host
// names with a throwaway CA (internal/fakellm), scripted to make a coding
// agent edit its workspace, then try a host the sandbox does not allow,
// then finish. It logs the credential each request carried, so the demo can
// show that the real key, not the sandbox's placeholder, reached it.
//
//	fakemodel -addr 127.0.0.7:443 -dir /tmp/demo -workspace /path/to/project
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/airlock-dev/airlock/internal/fakellm"
)

func main() {
	addr := flag.String("addr", "127.0.0.7:443", "listen address")
	dir := flag.String("dir", ".", "where to write ca.pem, the CA clients must trust")
	ws := flag.String("workspace", "", "the agent's workspace (where the scripted edit goes)")
	flag.Parse()
	if *ws == "" {
		log.Fatal("fakemodel: -workspace is required")
	}
	script := []fakellm.Step{
		{Text: "I'll add a greeting module.", Tool: "Write", Args: map[string]any{
			"file_path": filepath.Join(*ws, "greeting.py"),
			"content":   "def greet(name):\n    return f\"hello, {name}\"\n",
		}},
		{Text: "Let me check the docs online.", Tool: "Bash", Args: map[string]any{
			"command":     "curl -sS -m 5 https://pastebin.com/raw/x 2>&1 | head -1",
			"description": "Fetch the docs",
		}},
		{Text: "I wrote greeting.py; the network outside the API was refused by the sandbox, so I did not fetch the docs."},
	}
	s, err := fakellm.Start(*addr, *dir, script, fakellm.Usage{Input: 1200, Output: 80})
	if err != nil {
		log.Fatal(err)
	}
	s.Set(func(s *fakellm.Server) { s.Log = os.Stdout })
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	s.Close()
}
