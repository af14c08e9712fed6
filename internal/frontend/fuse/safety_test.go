package fuse_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"bucketfs/internal/engine"
	"bucketfs/internal/meta"
	"bucketfs/internal/s3local"
	"bucketfs/internal/s3test"
)

// withTierCapacity bounds the tier, so that the engine evicts clean data.
func withTierCapacity(n int64) option { return func(c *engine.Config) { c.TierCapacity = n } }

func TestAFileSideVersionInLostFoundIsNeverEvicted(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1), withTierCapacity(24))
	forwardEvents(e)
	lf := conflictOnDoc(t, e)
	if len(lf) != 1 {
		t.Fatalf("lost+found holds %v", lf)
	}
	e.flush() // reconciles the moved inode, which has nothing to export
	ctx := context.Background()
	lost, err := e.eng.Meta.Lookup(ctx, e.eng.Meta.LostFound(), lf[0])
	if err != nil {
		t.Fatal(err)
	}
	dir, err := e.eng.Meta.Lookup(ctx, meta.RootIno, "c")
	if err != nil {
		t.Fatal(err)
	}
	winner, err := e.eng.Meta.Lookup(ctx, dir.Ino, "doc.txt")
	if err != nil {
		t.Fatal(err)
	}
	// A restart drops the kernel's references: only the sync state keeps
	// tier data from eviction now.
	e.stop()
	e.start()
	eventually(t, "eviction of the bucket's clean version", func() bool {
		return e.cached(uint64(winner.Ino)) == 0
	})
	if e.cached(uint64(lost.Ino)) == 0 {
		t.Error("the tier evicted the only copy of the file-side version in lost+found")
	}
	if b := readFile(t, e.path(e.eng.Meta.LostFoundName()+"/"+lf[0])); string(b) != "file side edit" {
		t.Fatalf("the file-side version in lost+found reads %q", b)
	}
}

// holdingProxy is an s3test.Proxy that holds back the plain PUT of one
// key (path suffix) until released: the request, or with arm's after, the
// store's answer to it.
type holdingProxy struct {
	url     string
	mu      sync.Mutex
	suffix  string
	after   bool
	arrived chan struct{}
	release chan struct{}
}

func newHoldingProxy(t *testing.T, srv *s3local.Server) *holdingProxy {
	t.Helper()
	p := &holdingProxy{}
	p.url = s3test.NewProxy(t, srv, func(proxy *s3test.Proxy, w http.ResponseWriter, r *http.Request) bool {
		p.mu.Lock()
		hold := p.suffix != "" && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, p.suffix) &&
			r.Header.Get("x-amz-copy-source") == "" && r.URL.Query().Get("uploadId") == ""
		arrived, release, after := p.arrived, p.release, p.after
		if hold {
			p.suffix = ""
		}
		p.mu.Unlock()
		if !hold {
			return false
		}
		wait := func() {
			close(arrived)
			<-release
		}
		if after {
			proxy.ForwardThen(w, r, wait)
			return true
		}
		wait()
		return false // forwarded as it came
	}).URL
	return p
}

// hold arms the proxy for the next PUT whose path ends in suffix.
func (p *holdingProxy) hold(suffix string) (arrived, release chan struct{}) {
	return p.arm(suffix, false)
}

// arm is hold, or with after, holds the store's answer to that PUT: the
// object is stored, its writer not told yet.
func (p *holdingProxy) arm(suffix string, after bool) (arrived, release chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.suffix, p.after, p.arrived, p.release = suffix, after, make(chan struct{}), make(chan struct{})
	return p.arrived, p.release
}

func TestADirectoryRenamedWhileAFileInItUploadsMovesThatFileToo(t *testing.T) {
	p := newHoldingProxy(t, s3test.Store(t))
	e := newEnv(t, withEndpoint(p.url), withPoll(-1))
	if err := os.Mkdir(e.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.path("d/f"), []byte("v1"))
	e.flush()
	arrived, release := p.hold("/d/f")
	writeFile(t, e.path("d/f"), []byte("v2"))
	select {
	case <-arrived: // the export of d/f is under way
	case <-time.After(20 * time.Second):
		t.Fatal("the export of d/f never started")
	}
	if err := os.Rename(e.path("d"), e.path("e")); err != nil {
		t.Fatal(err)
	}
	// Export the directory while the file's upload is held.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go e.eng.Exporter.Flush(ctx)
	eventually(t, "the directory's marker under its new name", func() bool {
		_, _, ok := e.get("e/")
		return ok
	})
	close(release)
	ctx2 := context.Background()
	dir, err := e.eng.Meta.Lookup(ctx2, meta.RootIno, "e")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the held upload to be recorded", func() bool {
		in, err := e.eng.Meta.Lookup(ctx2, dir.Ino, "f")
		return err == nil && !in.Dirty()
	})
	e.flush()
	if b, _, ok := e.get("e/f"); !ok || string(b) != "v2" {
		t.Fatalf("e/f in the bucket: %q %v", b, ok)
	}
	if _, _, ok := e.get("d/f"); ok {
		t.Fatal("d/f still in the bucket after the rename was exported")
	}
}
