package fuse_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"bucketfs/internal/meta"
	"bucketfs/internal/s3test"
)

// Issue 21, corner 6: on MinIO a directory removed with rm -r came back,
// empty, about a second later, and stayed until listed. A poll had looked
// at the bucket before the removal, or before the exporter carried it out,
// and applied what it saw after. Here a proxy holds the store's answer to
// the poll's LIST of the root while rm -r runs through the mount, and in
// a variant also its look under d/ while the deletes are exported. The
// directory must not come back, in meta or in a readdir of the mount,
// neither right after that poll nor after the next one; an object put
// under it in the bucket afterwards brings it back.
func TestAPollOlderThanAnRmRDoesNotBringTheDirectoryBackThroughTheMount(t *testing.T) {
	for _, exported := range []bool{false, true} {
		t.Run(fmt.Sprintf("deletes exported before the listing is applied: %v", exported), func(t *testing.T) {
			h := s3test.NewListHolder(t, s3test.Store(t))
			e := newEnv(t, withEndpoint(h.URL), withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
			if err := os.Mkdir(e.path("d"), 0o755); err != nil {
				t.Fatal(err)
			}
			// More files than one look under a prefix reads.
			for i := range 120 {
				writeFile(t, e.path(fmt.Sprintf("d/f%03d", i)), []byte("file side"))
			}
			e.flush()
			ctx := context.Background()
			poll := func() error { return e.eng.Importer.PollDir(ctx, meta.RootIno) }

			arrived, release := h.Hold(func(r s3test.ListRequest) bool { return r.Prefix == "" && r.Delimiter == "/" })
			done := make(chan error, 1)
			go func() { done <- poll() }()
			waitHeld(t, arrived, done)
			if err := os.RemoveAll(e.path("d")); err != nil {
				t.Fatal(err)
			}
			if exported {
				under, releaseUnder := h.Hold(func(r s3test.ListRequest) bool { return r.Prefix == "d/" && r.Delimiter == "" })
				release()
				waitHeld(t, under, done)
				e.flush()
				releaseUnder()
			}
			release()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the poll never ended")
			}
			e.mustNotShow("d", "right after the poll")
			e.flush()
			if err := poll(); err != nil {
				t.Fatal(err)
			}
			e.mustNotShow("d", "after the next poll")
			// An object the bucket puts under the name later is a
			// bucket-side re-creation: the next poll imports it.
			e.put("d/new", []byte("bucket side"), nil)
			if err := poll(); err != nil {
				t.Fatal(err)
			}
			if !readsAs(e.path("d/new"), []byte("bucket side")) {
				t.Fatal("d/new, put in the bucket after the removal, does not read through the mount after a poll")
			}
		})
	}
}

// waitHeld waits for the proxy to hold the answer it was armed for.
func waitHeld(t *testing.T, arrived <-chan struct{}, done <-chan error) {
	t.Helper()
	select {
	case <-arrived:
	case err := <-done:
		t.Fatalf("the poll ended (%v) without the LIST the test holds", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the poll never sent the LIST the test holds")
	}
}

// mustNotShow fails unless name is absent from the root, in meta and
// through the mount (readdir and stat).
func (e *env) mustNotShow(name, when string) {
	e.t.Helper()
	if _, err := e.eng.Meta.Lookup(context.Background(), meta.RootIno, name); err == nil {
		e.t.Fatalf("%s: %s is back in meta", when, name)
	}
	ents, err := os.ReadDir(e.mnt)
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for _, d := range ents {
		if !strings.HasPrefix(d.Name(), meta.LostFoundPrefix) {
			names = append(names, d.Name())
		}
	}
	if slices.Contains(names, name) {
		e.t.Fatalf("%s: a readdir of the mount shows %q", when, names)
	}
	if _, err := os.Stat(e.path(name)); !errors.Is(err, os.ErrNotExist) {
		e.t.Fatalf("%s: stat of %s through the mount: %v, want ENOENT", when, name, err)
	}
}
