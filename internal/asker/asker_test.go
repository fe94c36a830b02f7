package asker

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/config"
)

// gate records the rules put in force, as the egress would hold them.
type gate struct {
	mu          sync.Mutex
	allow, deny []string
}

func (g *gate) SetRules(allow, deny []string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.allow, g.deny = allow, deny
	return nil
}

func (g *gate) rules() (allow, deny []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.allow, g.deny
}

// A saved decision is in force from Enforce on, whether or not the sandbox
// asks, and a revoke by another process reaches the gate and the audit
// stream; the control: a session decision goes to the gate too.
func TestSavedDecisionsAreInForceAndFollowed(t *testing.T) {
	root := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(root, "config"))
	dir, err := config.Dir()
	if err != nil {
		t.Fatal(err)
	}
	store, err := approval.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := store.Add(approval.Rule{Host: "saved.example", Allow: true, Scope: approval.Global, Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var records []audit.Record
	a, err := Open(filepath.Join(root, "ws"), func(r audit.Record) { mu.Lock(); records = append(records, r); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	if !a.Admits() || a.Asking() || a.Control() != nil {
		t.Fatalf("admits %v, asking %v; want a saved allow that admits and no queue", a.Admits(), a.Asking())
	}
	// The queue comes before Enforce, as in a sandbox's start.
	if err := a.StartQueue(Queue{Sandbox: "s1", Approvals: config.Approvals{Mode: config.ApprovalsAsk}}); err != nil {
		t.Fatal(err)
	}
	g := &gate{}
	if err := a.Enforce(g); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if allow, _ := g.rules(); !slices.Contains(allow, "saved.example") {
		t.Fatalf("the gate allows %q, want the saved host", allow)
	}
	if _, err := store.Revoke(saved.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		allow, _ := g.rules()
		mu.Lock()
		revoked := len(records) > 0 && records[0].Decision == "revoke"
		mu.Unlock()
		if !slices.Contains(allow, "saved.example") && revoked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the revoke the gate allows %q and the audit has %+v", allow, records)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The control: a session decision on a queued request is in force too.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan approval.Decision, 1)
	go func() {
		got <- a.Ask(ctx, approval.Request{Kind: approval.KindNetwork, Subject: "new.example", Host: "new.example", Port: 443})
	}()
	var id string
	for id == "" && ctx.Err() == nil {
		if p := a.Control().Pending(); len(p) > 0 {
			id = p[0].ID
		}
		time.Sleep(time.Millisecond)
	}
	if err := a.Control().Decide(id, approval.Decision{Allow: true, Scope: approval.Session, By: "test"}); err != nil {
		t.Fatal(err)
	}
	if d := <-got; !d.Allow {
		t.Errorf("the waiting request got %+v, want an allow", d)
	}
	if allow, _ := g.rules(); !slices.Contains(allow, "new.example") {
		t.Errorf("after a session allow the gate allows %q, want new.example", allow)
	}
}
