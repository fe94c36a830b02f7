package workspace

import (
	"errors"
	"io/fs"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// baseState is where a session's start manifest is. It moves one way:
//
//	baseUnbegun → baseWalking → baseTaken
//	baseUnbegun → baseAbandoned → baseTaken   (bind: stopped before the walk)
//
// Copy mode and a session opened again begin at baseTaken.
type baseState int32

const (
	// baseUnbegun: left for Background (or a review that cannot wait).
	baseUnbegun baseState = iota
	// baseWalking: the walk holds its turn on the tree and is under way;
	// in bind mode it ends where it is once the sandbox stops (a Partial).
	baseWalking
	// baseAbandoned: bind: the sandbox stopped before the walk began; the
	// review reads the tree as the sandbox left it and needs none of it.
	baseAbandoned
	// baseTaken: the manifest, its Partial or its error is known (or kept
	// in the session's directory, for a session opened again).
	baseTaken
)

var errAbandoned = errors.New("start manifest abandoned")

// backgroundDelay is how long an overlay waits before taking its manifest.
const backgroundDelay = 300 * time.Millisecond

// walkFunc takes the start manifest on workers (0: every CPU); stop, if
// not nil, cuts it short (ErrStopped and a Partial). It calls begin once
// it has its turn on the tree, and gives up (errAbandoned) if begin says
// the walk is no longer wanted.
type walkFunc func(workers int, stop <-chan struct{}, begin func() bool) (Partial, error)

// baseScan is a session's start manifest, taken beside the sandbox.
type baseScan struct {
	walk  walkFunc
	delay time.Duration // before the walk, unless hurried (overlay)
	stops bool          // the walk ends once the sandbox stopped (bind)
	// keep saves a whole manifest taken while the sandbox runs, for a
	// review by another process; load reads the kept one.
	keep func(Manifest) error
	load func() (Manifest, error)

	state   atomic.Int32 // a baseState
	pending bool         // not yet started: Background's (the session's goroutine only)

	hurry     chan struct{} // closed when the manifest is waited for
	hurryOnce sync.Once
	stopped   chan struct{} // bind: closed once the sandbox stopped
	stopOnce  sync.Once
	done      chan struct{} // closed at baseTaken

	mu      sync.Mutex
	base    Manifest
	partial *Partial // the walk was cut short by stopped
	err     error
}

func newBaseScan(walk walkFunc, delay time.Duration, stops bool, keep func(Manifest) error, load func() (Manifest, error)) *baseScan {
	return &baseScan{walk: walk, delay: delay, stops: stops, keep: keep, load: load, pending: walk != nil,
		hurry: make(chan struct{}), stopped: make(chan struct{}), done: make(chan struct{})}
}

// taken is a scan at baseTaken: m, or, if nil, the kept one (load).
func taken(m Manifest, load func() (Manifest, error)) *baseScan {
	b := newBaseScan(nil, 0, false, nil, load)
	b.base = m
	b.state.Store(int32(baseTaken))
	close(b.done)
	return b
}

// begin is the walk's: baseUnbegun → baseWalking, unless abandoned.
func (b *baseScan) begin() bool {
	return !b.stops || b.state.CompareAndSwap(int32(baseUnbegun), int32(baseWalking))
}

// start begins the walk in the background, once.
func (b *baseScan) start() {
	if b.pending {
		b.pending = false
		go b.run(true)
	}
}

// run takes the manifest on half the CPUs (the agent keeps the rest), or
// on all of them when someone is already waiting for it; in the
// background, an overlay's waits a moment first (a short command never
// pays for it), unless someone waits.
func (b *baseScan) run(background bool) {
	if background && b.delay > 0 {
		select {
		case <-time.After(b.delay):
		case <-b.hurry:
		}
	}
	workers := max(1, runtime.GOMAXPROCS(0)/2)
	if closed(b.hurry) {
		workers = 0
	}
	var stop <-chan struct{}
	if b.stops {
		stop = b.stopped
	}
	w, err := b.walk(workers, stop, b.begin)
	if err == errAbandoned {
		return // the review owns the manifest now (wait)
	}
	switch {
	case err == ErrStopped:
		err = nil
		b.mu.Lock()
		b.partial = &w
		b.mu.Unlock()
	case err == nil && !closed(b.stopped) && b.keep != nil:
		// Kept for a review by another process (airlock diff of a running
		// sandbox, a supervisor that crashed); once the sandbox has
		// stopped, this process's review is the one that reads it.
		err = b.keep(w.Manifest)
	}
	b.settle(w.Manifest, err)
}

// settle moves to baseTaken.
func (b *baseScan) settle(m Manifest, err error) {
	b.mu.Lock()
	b.base, b.err = m, err
	b.mu.Unlock()
	b.state.Store(int32(baseTaken))
	close(b.done)
}

// stop says the sandbox has stopped: a bind walk under way ends where it
// is (what it has not reached is as the sandbox left it).
func (b *baseScan) stop() { b.stopOnce.Do(func() { close(b.stopped) }) }

// cutShort is what the walk saw before the sandbox stopped, or nil if it
// was whole.
func (b *baseScan) cutShort() *Partial {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.partial
}

// wait returns the start manifest, hurrying it; from the session's
// goroutine.
func (b *baseScan) wait() (Manifest, error) {
	b.hurryOnce.Do(func() { close(b.hurry) })
	if b.stops && closed(b.stopped) && b.state.CompareAndSwap(int32(baseUnbegun), int32(baseAbandoned)) {
		// The sandbox stopped before the walk began: the tree as it left
		// it is all the review needs to read.
		b.pending = false
		b.mu.Lock()
		b.partial = &Partial{Manifest: Manifest{}}
		b.mu.Unlock()
		b.settle(Manifest{}, nil)
	}
	if b.pending { // never started in the background: take it now
		b.pending = false
		b.run(false)
	}
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.base != nil || b.err != nil {
		return b.base, b.err
	}
	m, err := b.load()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = errors.New("workspace: no manifest of the workspace yet: an overlay's is taken in the background after start; try again in a moment (if the supervisor crashed first, the changes cannot be compared)")
		}
		b.err = err
		return nil, err
	}
	b.base = m
	return m, nil
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
