package sync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/meta"
	"bucketfs/internal/s3test"
)

// Issue 23 (audit 1.2): the same rule as pollorder_test.go's with two
// servers on one store. Server A is where the file side removes and where
// the exporter carries the removal out; server B's importer looks at the
// bucket through the holding proxy. B's import, resting on a look made
// before A's removal, never brings the name back.

// newTwoServerHeldEnv is a heldEnv whose namespace is two meta.Stores on
// one kv store: m and e are server A's, im is server B's importer, on B's
// Store.
func newTwoServerHeldEnv(t *testing.T) *heldEnv {
	t.Helper()
	h := newHeldEnv(t) // for its bucket, proxy and clients
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	open := func(server uint64) *meta.Store {
		m, err := meta.Open(context.Background(), db, meta.Options{ExportDelay: time.Minute, ChangeLog: true, Server: server})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := open(1), open(2)
	bucketB := h.im.bucket // through the proxy
	h.m = a
	h.im = NewImporter(b, bucketB, ImporterConfig{})
	list(t, b, h.im, "") // the root, listed while the bucket is empty
	h.e = NewExporter(a, bucketB, NewImporter(a, bucketB, ImporterConfig{}), ExporterConfig{})
	t.Cleanup(h.e.Wait)
	return h
}

func TestAPollOnOneServerOlderThanAnRmRThroughAnotherDoesNotBringTheDirectoryBack(t *testing.T) {
	for _, exported := range []bool{false, true} {
		t.Run(fmt.Sprintf("deletes exported before the listing is applied: %v", exported), func(t *testing.T) {
			h := newTwoServerHeldEnv(t)
			h.makeDir(t, "d", filesIn)
			steps := []heldStep{{rootListing, func() { h.removeAll(t, "d") }}}
			if exported {
				steps = append(steps, heldStep{lookUnder("d"), func() { h.flush(t) }})
			}
			if err := h.pollHeld(t, steps...); err != nil {
				t.Fatal(err)
			}
			h.mustStayGone(t, "d")
		})
	}
}

func TestAPollOnOneServerOlderThanAFilesRemovalThroughAnotherDoesNotBringTheFileBack(t *testing.T) {
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
				h := newTwoServerHeldEnv(t)
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

// The lookup path: A removes d with rm -r; B then looks for d in the
// bucket alone (LookupOne), and A's exporter deletes d's objects and drops
// their records after B's look: the objects B saw are A's removal, not
// evidence of a directory.
func TestALookupOnOneServerOlderThanAnRmRThroughAnotherDoesNotBringTheDirectoryBack(t *testing.T) {
	h := newTwoServerHeldEnv(t)
	ctx := context.Background()
	h.makeDir(t, "d", 3)
	root, err := h.m.Get(ctx, meta.RootIno)
	if err != nil {
		t.Fatal(err)
	}
	// B's lookup of d: its look under d/ is held while A removes d and
	// exports the deletes.
	arrived, release := h.hold.Hold(func(r s3test.ListRequest) bool { return r.Prefix == "fs/d/" })
	done := make(chan error, 1)
	h.removeAll(t, "d")
	go func() { done <- h.im.LookupOne(ctx, &root, "d") }()
	select {
	case <-arrived:
	case err := <-done:
		t.Fatalf("the lookup ended (%v) without the LIST the test holds", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the lookup never sent the LIST the test holds")
	}
	h.flush(t)
	release()
	if err := <-done; err != nil && !errors.Is(err, syscall.ENOENT) {
		t.Fatal(err)
	}
	h.mustBeGone(t, "d", "after a lookup older than the exported rm -r")
}
