package workspace

import (
	"errors"
	"io/fs"
	"sync/atomic"
	"testing"
	"time"
)

// fakeWalk is a start manifest's walk that reports what it was asked.
type fakeWalk struct {
	calls   atomic.Int32
	workers atomic.Int32
	began   chan bool     // what begin said
	block   chan struct{} // the walk holds until stopped or this closes
}

func newFakeWalk() *fakeWalk {
	return &fakeWalk{began: make(chan bool, 1), block: make(chan struct{})}
}

func (w *fakeWalk) walk(workers int, stop <-chan struct{}, begin func() bool) (Partial, error) {
	w.calls.Add(1)
	w.workers.Store(int32(workers))
	ok := begin()
	w.began <- ok
	if !ok {
		return Partial{}, errAbandoned
	}
	select {
	case <-stop:
		return Partial{Manifest: Manifest{"seen": {Path: "seen"}}}, ErrStopped
	case <-w.block:
		return Partial{Manifest: Manifest{"all": {Path: "all"}}}, nil
	}
}

func noManifest() (Manifest, error) { return nil, fs.ErrNotExist }

func TestABindStartManifestNotBegunWhenTheSandboxStopsIsAbandoned(t *testing.T) {
	w := newFakeWalk()
	var kept atomic.Bool
	b := newBaseScan(w.walk, 0, true, func(Manifest) error { kept.Store(true); return nil }, noManifest)
	b.stop() // a short command: stopped before Background
	m, err := b.wait()
	if err != nil || len(m) != 0 {
		t.Fatalf("wait = %v, %v; want an empty manifest", m, err)
	}
	if p := b.cutShort(); p == nil || len(p.Manifest) != 0 {
		t.Errorf("cut short at %v, want an empty partial (the review reads the tree as left)", p)
	}
	if baseState(b.state.Load()) != baseTaken || w.calls.Load() != 0 || kept.Load() {
		t.Errorf("state %d, walks %d, kept %v; want taken, no walk, nothing kept", b.state.Load(), w.calls.Load(), kept.Load())
	}
	b.start() // a late Background starts nothing
	if w.calls.Load() != 0 {
		t.Error("Background walked an abandoned manifest")
	}
}

func TestABindWalkUnderWayEndsWhereItIsWhenTheSandboxStops(t *testing.T) {
	w := newFakeWalk()
	var kept atomic.Bool
	b := newBaseScan(w.walk, 0, true, func(Manifest) error { kept.Store(true); return nil }, noManifest)
	b.start()
	if !<-w.began {
		t.Fatal("the walk was refused its start")
	}
	if baseState(b.state.Load()) != baseWalking {
		t.Fatalf("state %d once begun, want walking", b.state.Load())
	}
	b.stop()
	m, err := b.wait()
	if err != nil || len(m) != 1 || b.cutShort() == nil || kept.Load() {
		t.Errorf("wait = %v, %v; cut short %v; kept %v: want the partial, not kept", m, err, b.cutShort(), kept.Load())
	}
}

func TestAWholeManifestTakenWhileTheSandboxRunsIsKept(t *testing.T) {
	w := newFakeWalk()
	kept := make(chan Manifest, 1)
	b := newBaseScan(w.walk, 0, true, func(m Manifest) error { kept <- m; return nil }, noManifest)
	b.start()
	<-w.began
	close(w.block)
	select {
	case m := <-kept:
		if len(m) != 1 {
			t.Errorf("kept %v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the whole manifest was not kept for another process's review")
	}
	if m, err := b.wait(); err != nil || b.cutShort() != nil || len(m) != 1 {
		t.Errorf("wait = %v, %v; cut short %v", m, err, b.cutShort())
	}
}

func TestAnOverlayManifestWaitsItsDelayUnlessSomeoneWaitsForIt(t *testing.T) {
	w := newFakeWalk()
	close(w.block)
	b := newBaseScan(w.walk, time.Hour, false, func(Manifest) error { return nil }, noManifest)
	b.start()
	time.Sleep(20 * time.Millisecond)
	if w.calls.Load() != 0 {
		t.Fatal("the overlay's walk began before its delay")
	}
	done := make(chan error, 1)
	go func() { _, err := b.wait(); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiting did not hurry the walk")
	}
	if w.workers.Load() != 0 {
		t.Errorf("a hurried walk ran on %d workers, want every CPU (0)", w.workers.Load())
	}
}

func TestATakenManifestIsReadFromTheSessionWhenNotInMemory(t *testing.T) {
	b := taken(nil, noManifest)
	if _, err := b.wait(); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a session opened without its manifest: %v, want the explained error", err)
	}
	b = taken(nil, func() (Manifest, error) { return Manifest{"a": {Path: "a"}}, nil })
	if m, err := b.wait(); err != nil || len(m) != 1 {
		t.Errorf("a session opened again: %v, %v; want the kept manifest", m, err)
	}
}
