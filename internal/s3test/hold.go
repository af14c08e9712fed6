package s3test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// ListRequest is what a LIST (ListObjectsV2) asks for.
type ListRequest struct {
	Prefix    string // the full key prefix, as sent
	Delimiter string // "" for a listing at any depth
}

// ListHolder is an HTTP proxy in front of a store that holds back the
// store's answer to one chosen LIST: the store has answered, the client has
// not read the answer yet. A test changes the file side meanwhile, so that
// the listing the client then applies is older than the change, which is
// the interleaving a slow LIST makes by chance.
type ListHolder struct {
	URL string // the proxy's endpoint, for the client under test

	mu      sync.Mutex
	match   func(ListRequest) bool
	arrived chan struct{}
	release chan struct{}
	held    []chan struct{} // every release channel handed out, for cleanup
}

// NewListHolder starts a proxy in front of endpoint. Anything it still
// holds is released when the test ends.
func NewListHolder(t testing.TB, endpoint string) *ListHolder {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	h := &ListHolder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		req := ListRequest{Prefix: q.Get("prefix"), Delimiter: q.Get("delimiter")}
		h.mu.Lock()
		hold := r.Method == http.MethodGet && q.Get("list-type") == "2" && h.match != nil && h.match(req)
		arrived, release := h.arrived, h.release
		if hold {
			h.match = nil
		}
		h.mu.Unlock()
		if !hold {
			rp.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		close(arrived)
		<-release
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { // runs before srv.Close, which waits for held requests
		h.mu.Lock()
		defer h.mu.Unlock()
		h.match = nil
		for _, c := range h.held {
			free(c)
		}
	})
	h.URL = srv.URL
	return h
}

// Hold arms the proxy for the next LIST that match accepts. arrived is
// closed once the store has answered it; the answer reaches the client
// after release is called (release may be called more than once).
func (h *ListHolder) Hold(match func(ListRequest) bool) (arrived <-chan struct{}, release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, r := make(chan struct{}), make(chan struct{})
	h.match, h.arrived, h.release = match, a, r
	h.held = append(h.held, r)
	return a, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		free(r)
	}
}

// free closes c unless it is closed already (callers hold h.mu).
func free(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}
