package sync

import (
	"bytes"
	"context"
	"syscall"
	"testing"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
)

// Issue 10, item 4: a file renamed over an exported file with the same
// content. The replacing inode's upload to the name lands before the
// replaced inode's delete of it, and before the replacing inode has
// recorded the name as its own. All the objects have the same ETag, so a
// delete that compared ETags deleted the object just written, and the
// file side then lost the file too. The rule: the delete of a replaced
// inode's object never removes a version another inode of this file
// system wrote.
func TestTheDeleteOfAReplacedFileLeavesTheObjectOfTheFileThatReplacedIt(t *testing.T) {
	b := fakeStore(t)
	m := newMeta(t)
	e := NewExporter(m, b, nil, ExporterConfig{})
	ctx := context.Background()
	body := []byte("the same content")
	mk := func(name string) meta.Inode {
		in, err := m.Create(ctx, meta.RootIno, name, meta.Inode{Mode: syscall.S_IFREG | 0o644}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if in, err = m.WriteData(ctx, in.Ino, body, 0, false, 0, meta.Limits{}); err != nil {
			t.Fatal(err)
		}
		return in
	}
	a, bIn := mk("a"), mk("b")
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := m.Get(ctx, a.Ino)
	if err != nil || len(a.Keys) != 1 {
		t.Fatalf("a after its export: %+v, %v", a.Keys, err)
	}
	old := a.Keys[0]
	if _, err := m.Rename(ctx, meta.RootIno, "b", meta.RootIno, "a", 0, nil); err != nil {
		t.Fatal(err)
	}
	// The replacing inode's upload to "a", as its export sends it; its
	// record of the name is not committed yet.
	bIn, err = m.Get(ctx, bIn.Ino)
	if err != nil {
		t.Fatal(err)
	}
	md := objectMetadata(&bIn, m.Fsid())
	if _, err := b.Put(ctx, "a", bytes.NewReader(body), int64(len(body)), bucket.PutOptions{Metadata: md}); err != nil {
		t.Fatal(err)
	}
	if conflict, err := e.deleteIfUnchanged(ctx, a.Ino, old); err != nil || conflict != "" {
		t.Fatalf("delete of the replaced inode's object: conflict %q, %v", conflict, err)
	}
	cur, err := b.Head(ctx, "a", "")
	if err != nil {
		t.Fatalf("the object the replacing file wrote is gone: %v", err)
	}
	if who, _, _ := originOf(cur.Metadata); who != inodeOrigin(m.Fsid(), bIn.Ino) {
		t.Fatalf("a is now from %q, want the replacing inode", who)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Head(ctx, "a", ""); err != nil {
		t.Fatalf("after the flush, a: %v", err)
	}
}
