package proto

import (
	"sync"
	"testing"
)

// echoPeer answers every request with a Result carrying the request's data.
func echoPeer(t *testing.T, c *Conn) {
	go func() {
		for {
			m, files, err := c.Recv()
			if err != nil {
				return
			}
			for _, f := range files {
				f.Close()
			}
			c.Send(&Msg{ID: m.ID, Op: OpResult, Data: m.Data})
		}
	}()
}

func TestRouterRoutesConcurrentRepliesByID(t *testing.T) {
	a, b := pair(t)
	echoPeer(t, b)
	r := NewRouter(a)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := string(rune('A' + i%26))
			id, replies, err := r.Request(&Msg{Op: OpReadFile, Path: "x", Data: []byte(want)})
			if err != nil {
				t.Error(err)
				return
			}
			defer r.Done(id)
			if got := <-replies; got.ID != id || string(got.Data) != want {
				t.Errorf("request %d got reply %d %q, want %q", id, got.ID, got.Data, want)
			}
		}()
	}
	wg.Wait()
}

func TestRouterClosesWaitingRequestsWhenConnectionEnds(t *testing.T) {
	a, b := pair(t)
	r := NewRouter(a)
	_, replies, err := r.Request(&Msg{Op: OpStat, Path: "/"})
	if err != nil {
		t.Fatal(err)
	}
	b.Close() // the peer goes away without answering
	if _, ok := <-replies; ok {
		t.Fatal("want the reply channel closed")
	}
	// The error is recorded before the channels close, under one lock.
	if _, _, err := r.Request(&Msg{Op: OpStat, Path: "/"}); err != ErrConnClosed {
		t.Fatalf("Request on a dead connection = %v, want ErrConnClosed", err)
	}
}

func TestRouterExpectTakesWhatThePeerSendsUnaskedAndDropsItAfterDone(t *testing.T) {
	a, b := pair(t)
	r := NewRouter(a)
	ready, err := r.Expect(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Expect(0); err == nil {
		t.Error("a second Expect(0) succeeded, want an error")
	}
	echoPeer(t, b)
	b.Send(&Msg{Op: OpReady})
	if got := <-ready; got.Op != OpReady {
		t.Fatalf("got %s, want ready", got.Op)
	}
	r.Done(0)
	b.Send(&Msg{Op: OpReady}) // unasked and unexpected: dropped
	// Requests still get their replies, numbered from 1.
	id, replies, err := r.Request(&Msg{Op: OpStat, Path: "/", Data: []byte("x")})
	if err != nil || id == 0 {
		t.Fatalf("Request = %d, %v", id, err)
	}
	if got := <-replies; got.ID != id || string(got.Data) != "x" {
		t.Errorf("reply %+v", got.Msg)
	}
	_, pending, _ := r.Request(&Msg{Op: OpStat, Path: "/"})
	b.Close()
	for range pending { // closed once the router has seen the end
	}
	if _, err := r.Expect(1 << 31); err != ErrConnClosed {
		t.Errorf("Expect on a dead connection = %v, want ErrConnClosed", err)
	}
}
