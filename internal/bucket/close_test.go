package bucket

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Close closes every connection the client made, not only those of the
// transports it configured (the SDK works on copies of them): a store
// that waits at its shutdown for its clients' connections (versitygw's
// fasthttp does) then stops at once. Before, the embedded store's
// shutdown after a run of bench/pgbench waited its whole 10 s and failed.
func TestCloseClosesEveryConnectionTheClientMade(t *testing.T) {
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound) // an answer, not S3's: the connection stays open, idle
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := New(context.Background(), Config{Bucket: "b", Endpoint: srv.URL, Region: "us-east-1",
		AccessKey: "k", SecretKey: "s", OpTimeout: 5 * time.Second, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c.Head(context.Background(), "x", "") // fails: only the connection counts
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(open) }
	if count() == 0 {
		t.Fatal("the client made no connection to the server")
	}
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for count() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections of the client still open after Close", count())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
