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
