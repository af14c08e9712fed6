package s3test

import (
	"net/http"
	"sync"
	"testing"

	"bucketfs/internal/s3local"
)

// ListRequest is what a LIST (ListObjectsV2) asks for.
type ListRequest struct {
	Prefix    string // the full key prefix, as sent
	Delimiter string // "" for a listing at any depth
}

// ListHolder is a Proxy in front of a store that holds back the store's
// answer to one chosen LIST: the store has answered, the client has not
// read the answer yet. A test changes the file side meanwhile, so that
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

// NewListHolder starts a proxy in front of srv. Anything it still holds is
// released when the test ends.
func NewListHolder(t testing.TB, srv *s3local.Server) *ListHolder {
	t.Helper()
	h := &ListHolder{}
	h.URL = NewProxy(t, srv, h.intercept).URL
	t.Cleanup(func() { // runs before the proxy's, which waits for held requests
		h.mu.Lock()
		defer h.mu.Unlock()
		h.match = nil
		for _, c := range h.held {
			free(c)
		}
	})
	return h
}

// intercept holds the answer to the LIST the proxy is armed for and lets
// every other request through.
func (h *ListHolder) intercept(p *Proxy, w http.ResponseWriter, r *http.Request) bool {
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
		return false
	}
	p.ForwardThen(w, r, func() {
		close(arrived)
		<-release
	})
	return true
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
