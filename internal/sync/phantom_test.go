package sync

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
)

// Issue 10, item 1: versitygw (the store here) and MinIO list a prefix
// that holds only noncurrent versions and delete markers as a common
// prefix. A directory exists on the file side only if the file side made
// it or the bucket holds a current object under it: such a prefix makes
// none, neither in a poll nor in a lookup of the name, and a directory
// removed on the file side does not come back.
func TestAPrefixOfOnlyDeletedObjectsMakesNoDirectory(t *testing.T) {
	st, m, im, _ := newSyncEnv(t) // the root is listed while the bucket is empty
	ctx := context.Background()
	if _, err := st.bucket.Put(ctx, "gone/x", strings.NewReader("x"), 1, bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := st.bucket.Delete(ctx, "gone/x"); err != nil {
		t.Fatal(err)
	}
	l, err := st.bucket.List(ctx, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the store lists the prefixes %q", l.Prefixes)
	if err := im.PollDir(ctx, meta.RootIno); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lookup(ctx, meta.RootIno, "gone"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("after a poll, lookup of the deleted prefix: %v, want ENOENT", err)
	}
	root, err := m.Get(ctx, meta.RootIno)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.LookupOne(ctx, &root, "gone"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("LookupOne of the deleted prefix: %v, want ENOENT", err)
	}
	if _, err := m.Lookup(ctx, meta.RootIno, "gone"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("after a lookup, the deleted prefix: %v, want ENOENT", err)
	}
	// A first listing of the bucket (a new state directory) makes the
	// directories that hold objects, and no other. (An object "gone"
	// beside the deleted prefix, which MinIO allows, cannot be made on
	// versitygw, whose posix backend keeps the empty directory.)
	if _, err := st.bucket.Put(ctx, "kept/y", strings.NewReader("y"), 1, bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	m2 := newMeta(t)
	if got := list(t, m2, NewImporter(m2, st.bucket, ImporterConfig{}), ""); !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("a first listing of the root: %q, want [kept]", got)
	}
}
