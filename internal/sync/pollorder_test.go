package sync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
	"bucketfs/internal/s3test"
)

// Issue 21, corner 6: on MinIO a directory removed with rm -r came back,
// empty, a moment later. A poll had looked at the bucket before the removal
// (or before the exporter carried it out) and applied what it saw after.
// Rule: an import based on a bucket observation made before a file-side
// change to the same name (a delete, a rename away, the rmdir of the
// directory) never undoes that change. These tests hold the store's answer
// to a chosen LIST in a proxy (s3test.ListHolder) while the file side
// changes, on the embedded versitygw store, which lists a prefix of only
// delete markers as MinIO does.

// heldEnv is a namespace synced with a bucket of the embedded store through
// a proxy that can hold back the answer to a LIST. The export delay is a
// minute: nothing is exported but by Flush.
type heldEnv struct {
	hold   *s3test.ListHolder
	direct *bucket.Client // the same bucket, not through the proxy
	m      *meta.Store
	im     *Importer
	e      *Exporter
}

func newHeldEnv(t *testing.T) *heldEnv {
	t.Helper()
	srv, name := s3test.NewBucket(t)
	h := s3test.NewListHolder(t, srv)
	client := func(endpoint string) *bucket.Client {
		b, err := bucket.New(context.Background(), bucket.Config{Bucket: name, Prefix: "fs/", Endpoint: endpoint,
			AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region, OpTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return b
	}
	b := client(h.URL)
	m := newMeta(t)
	im := NewImporter(m, b, ImporterConfig{})
	list(t, m, im, "") // the root, listed while the bucket is empty
	e := NewExporter(m, b, im, ExporterConfig{})
	t.Cleanup(e.Wait) // before the store closes (newMeta's cleanup)
	return &heldEnv{hold: h, direct: client(srv.Endpoint), m: m, im: im, e: e}
}

// filesIn is how many files the directory of these tests holds: more
// than one look under a prefix reads (the poll looked at 100 keys and took
// a prefix with more for a directory).
const filesIn = 120

// makeDir makes the directory name with n files in the root and exports it.
func (h *heldEnv) makeDir(t *testing.T, name string, n int) meta.Inode {
	t.Helper()
	ctx := context.Background()
	d, err := h.m.Create(ctx, meta.RootIno, name, meta.Inode{Mode: syscall.S_IFDIR | 0o755}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		in, err := h.m.Create(ctx, d.Ino, fmt.Sprintf("f%03d", i), meta.Inode{Mode: syscall.S_IFREG | 0o644}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.m.WriteData(ctx, in.Ino, []byte(name), 0, false, 0, meta.Limits{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	h.flush(t)
	return d
}

func (h *heldEnv) flush(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := h.e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// removeAll removes the directory name of the root and everything in it,
// as rm -r does.
func (h *heldEnv) removeAll(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	d, err := h.m.Lookup(ctx, meta.RootIno, name)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := h.m.ReadDir(ctx, d.Ino, "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, err := h.m.Remove(ctx, d.Ino, e.Name, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.m.Remove(ctx, meta.RootIno, name, true, nil); err != nil {
		t.Fatal(err)
	}
}

// heldStep holds the answer to the first LIST that match accepts until
// during has run.
type heldStep struct {
	match  func(s3test.ListRequest) bool
	during func()
}

// pollHeld polls the root through the steps in turn: each one's hold is
// armed before the one before it lets its answer go. It returns the
// poll's error.
func (h *heldEnv) pollHeld(t *testing.T, steps ...heldStep) error {
	t.Helper()
	arrived, release := h.hold.Hold(steps[0].match)
	done := make(chan error, 1)
	go func() { done <- h.im.PollDir(context.Background(), meta.RootIno) }()
	for i, s := range steps {
		select {
		case <-arrived:
		case err := <-done:
			t.Fatalf("the poll ended (%v) without LIST number %d that the test holds", err, i+1)
		case <-time.After(30 * time.Second):
			t.Fatalf("the poll never sent LIST number %d that the test holds", i+1)
		}
		s.during()
		prev := release
		if i+1 < len(steps) {
			arrived, release = h.hold.Hold(steps[i+1].match)
		}
		prev()
	}
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("the poll never ended")
		return nil
	}
}

// rootListing matches the poll's LIST of the root (under the prefix fs/).
func rootListing(r s3test.ListRequest) bool { return r.Prefix == "fs/" && r.Delimiter == "/" }

// lookUnder matches a LIST at any depth under the directory name: the
// look at whether current objects lie under it.
func lookUnder(name string) func(s3test.ListRequest) bool {
	return func(r s3test.ListRequest) bool { return r.Prefix == "fs/"+name+"/" && r.Delimiter == "" }
}

// names lists the root's names, without lost+found.
func (h *heldEnv) names(t *testing.T) []string {
	t.Helper()
	ents, err := h.m.ReadDir(context.Background(), meta.RootIno, "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name, meta.LostFoundPrefix) {
			out = append(out, e.Name)
		}
	}
	return out
}

func (h *heldEnv) mustBeGone(t *testing.T, name, when string) {
	t.Helper()
	if in, err := h.m.Lookup(context.Background(), meta.RootIno, name); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("%s: %s is back (inode %d, %v); the root holds %q", when, name, in.Ino, err, h.names(t))
	}
}

// mustStayGone checks that name is gone after the held poll, and still
// gone after everything is exported and the root polled once more.
func (h *heldEnv) mustStayGone(t *testing.T, name string) {
	t.Helper()
	h.mustBeGone(t, name, "right after the poll")
	h.flush(t)
	if err := h.im.PollDir(context.Background(), meta.RootIno); err != nil {
		t.Fatal(err)
	}
	h.mustBeGone(t, name, "after the next poll")
}

func TestAPollListingOlderThanAnRmRDoesNotBringTheDirectoryBack(t *testing.T) {
	for _, exported := range []bool{false, true} {
		t.Run(fmt.Sprintf("deletes exported before the listing is applied: %v", exported), func(t *testing.T) {
			h := newHeldEnv(t)
			h.makeDir(t, "d", filesIn)
			steps := []heldStep{{rootListing, func() { h.removeAll(t, "d") }}}
			if exported {
				// The poll's look under d/ is answered while the deletes
				// are still to be exported, and read after they were.
				steps = append(steps, heldStep{lookUnder("d"), func() { h.flush(t) }})
			}
			err := h.pollHeld(t, steps...)
			if err != nil {
				t.Fatal(err)
			}
			h.mustStayGone(t, "d")
		})
	}
}

func TestAPollListingOlderThanARenameAwayDoesNotBringTheDirectoryBack(t *testing.T) {
	for _, exported := range []bool{false, true} {
		t.Run(fmt.Sprintf("rename exported before the listing is applied: %v", exported), func(t *testing.T) {
			h := newHeldEnv(t)
			h.makeDir(t, "d", filesIn)
			steps := []heldStep{{rootListing, func() {
				if _, err := h.m.Rename(context.Background(), meta.RootIno, "d", meta.RootIno, "e", 0, nil); err != nil {
					t.Fatal(err)
				}
			}}}
			if exported {
				steps = append(steps, heldStep{lookUnder("d"), func() { h.flush(t) }})
			}
			if err := h.pollHeld(t, steps...); err != nil {
				t.Fatal(err)
			}
			h.mustStayGone(t, "d")
			if got := h.names(t); !slices.Equal(got, []string{"e"}) {
				t.Fatalf("the root holds %q, want [e]", got)
			}
			if got := list(t, h.m, h.im, "e"); len(got) != filesIn {
				t.Fatalf("e holds %d names, want %d", len(got), filesIn)
			}
		})
	}
}

// A single file removed, or renamed away, while a listing that still
// names it is under way.
func TestAPollListingOlderThanAFilesRemovalDoesNotBringTheFileBack(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(h *heldEnv) error
		want   []string
	}{
		{"deleted", func(h *heldEnv) error {
			_, err := h.m.Remove(context.Background(), meta.RootIno, "f", false, nil)
			return err
		}, nil},
		{"renamed away", func(h *heldEnv) error {
			_, err := h.m.Rename(context.Background(), meta.RootIno, "f", meta.RootIno, "g", 0, nil)
			return err
		}, []string{"g"}},
	} {
		for _, exported := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, exported before the listing is applied: %v", c.name, exported), func(t *testing.T) {
				h := newHeldEnv(t)
				newFile(t, h.m, "f", []byte("file side"))
				h.flush(t)
				err := h.pollHeld(t, heldStep{rootListing, func() {
					if err := c.change(h); err != nil {
						t.Fatal(err)
					}
					if exported {
						h.flush(t)
					}
				}})
				if err != nil {
					t.Fatal(err)
				}
				h.mustStayGone(t, "f")
				if got := h.names(t); !slices.Equal(got, c.want) {
					t.Fatalf("the root holds %q, want %q", got, c.want)
				}
			})
		}
	}
}

// The fence keeps stale listings out, not the bucket: objects put under
// the removed names after the removal are imported by the next poll.
func TestABucketSideRecreationAfterALocalRemovalIsStillImported(t *testing.T) {
	h := newHeldEnv(t)
	ctx := context.Background()
	h.makeDir(t, "d", 3)
	newFile(t, h.m, "f", []byte("file side"))
	h.flush(t)
	err := h.pollHeld(t, heldStep{rootListing, func() {
		h.removeAll(t, "d")
		if _, err := h.m.Remove(ctx, meta.RootIno, "f", false, nil); err != nil {
			t.Fatal(err)
		}
		h.flush(t)
		// Put while the stale listing is still held: after the removal.
		for _, k := range []string{"d/new", "f"} {
			body := "bucket side " + k
			if _, err := h.direct.Put(ctx, k, strings.NewReader(body), int64(len(body)), bucket.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The held listing was older than the removal; the next one is not.
	if err := h.im.PollDir(ctx, meta.RootIno); err != nil {
		t.Fatal(err)
	}
	if got := h.names(t); !slices.Equal(got, []string{"d", "f"}) {
		t.Fatalf("the root holds %q, want [d f]", got)
	}
	if got := list(t, h.m, h.im, "d"); !slices.Equal(got, []string{"new"}) {
		t.Fatalf("d holds %q, want [new]", got)
	}
	f, err := h.m.Lookup(ctx, meta.RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	if f.Size != int64(len("bucket side f")) {
		t.Fatalf("f has %d bytes, want the bucket's %d", f.Size, len("bucket side f"))
	}
}

// The same rule on the lookup path: after a restart every directory is
// stale, and a name missing from one is looked for in the bucket alone
// (LookupOne). A directory removed with rm -r whose deletes the exporter
// has not carried out yet still has objects under its prefix; they are
// the file side's own and make no directory.
func TestALookupAfterARestartDoesNotBringBackADirectoryRemovedBeforeIt(t *testing.T) {
	h := newHeldEnv(t)
	ctx := context.Background()
	h.makeDir(t, "d", 3)
	h.removeAll(t, "d")
	restarted := NewImporter(h.m, h.im.bucket, ImporterConfig{}) // nothing is fresh
	root, err := h.m.Get(ctx, meta.RootIno)
	if err != nil {
		t.Fatal(err)
	}
	if err := restarted.LookupOne(ctx, &root, "d"); err != nil && !errors.Is(err, syscall.ENOENT) {
		t.Fatal(err)
	}
	h.mustBeGone(t, "d", "after a lookup of the name")
	h.flush(t)
	if err := restarted.PollDir(ctx, meta.RootIno); err != nil {
		t.Fatal(err)
	}
	h.mustBeGone(t, "d", "after the deletes were exported and the root polled")
}
