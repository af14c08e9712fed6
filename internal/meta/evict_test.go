package meta

import (
	"bytes"
	"context"
	"syscall"
	"testing"

	"bucketfs/internal/kv"
	"bucketfs/internal/tier"
)

// cachedImport imports an object of three blocks as "f" and fills the tier
// with all of it: a clean file the tier holds whole.
func cachedImport(t *testing.T, s *Store) Inode {
	t.Helper()
	ctx := context.Background()
	obj := Object{Key: "f", ETag: "e1", VersionID: "v1", Size: 3 * tier.BlockSize}
	if _, _, err := s.AddImported(ctx, Observation{}, RootIno, []Imported{{Name: "f", Mode: syscall.S_IFREG | 0o644, Obj: obj}}, true); err != nil {
		t.Fatal(err)
	}
	in, err := s.Lookup(ctx, RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FillData(ctx, in.Ino, obj, bytes.Repeat([]byte("b"), int(obj.Size)), 0, Limits{}); err != nil {
		t.Fatal(err)
	}
	return in
}

// evictAll runs EvictData on every file Evictable lists, and returns what
// it freed.
func evictAll(t *testing.T, s *Store) (freed int64) {
	t.Helper()
	ctx := context.Background()
	cands, err := s.Evictable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cands {
		n, err := s.EvictData(ctx, c.Ino)
		if err != nil {
			t.Fatal(err)
		}
		if n != c.Bytes {
			t.Errorf("inode %d was listed with %d evictable bytes and freed %d", c.Ino, c.Bytes, n)
		}
		freed += n
	}
	return freed
}

// A file with a change not yet exported gives up the blocks that hold
// only its base object's bytes, which reads then take from the bucket,
// and keeps the changed one.
func TestTheExportedBlocksOfAChangedFileAreEvicted(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	in := cachedImport(t, s)
	if _, err := s.WriteData(ctx, in.Ino, []byte("changed"), 10, false, 1, Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	if u, _ := s.Usage(ctx); u != (Usage{Total: 3 * tier.BlockSize, Dirty: tier.BlockSize}) {
		t.Fatalf("after a 7-byte change the tier counts %+v, want one block of three unexported", u)
	}
	if freed := evictAll(t, s); freed != 2*tier.BlockSize {
		t.Fatalf("eviction freed %d bytes, want the two unchanged blocks", freed)
	}
	p := make([]byte, 3*tier.BlockSize)
	_, n, missing, err := s.ReadData(ctx, in.Ino, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []tier.Range{{Off: tier.BlockSize, Len: 2 * tier.BlockSize}}
	if n != len(p) || len(missing) != 1 || missing[0] != want[0] || string(p[8:19]) != "bbchangedbb" {
		t.Fatalf("the file reads %d bytes, %q around the change, missing %v; want the change and %v from the bucket",
			n, p[8:19], missing, want)
	}
	if u, _ := s.Usage(ctx); u != (Usage{Total: tier.BlockSize, Dirty: tier.BlockSize}) {
		t.Fatalf("after the eviction the tier counts %+v", u)
	}
}

// A changed file whose base object is no longer its own (the bucket
// replaced it: the file went to lost+found without that object), or whose
// blocks carry no stamps (a record from before them), keeps every block:
// the tier may hold its only copy.
func TestAChangedFileWithoutItsOwnBaseOrStampsKeepsItsBlocks(t *testing.T) {
	for _, c := range []struct {
		what   string
		change func(t *testing.T, s *Store, in Inode)
	}{
		{"moved to lost+found", func(t *testing.T, s *Store, in Inode) {
			in, err := s.Get(context.Background(), in.Ino)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.MoveToLostFound(context.Background(), RootIno, "f", &in, "f.conflict", "f"); err != nil {
				t.Fatal(err)
			}
		}},
		{"without stamps", func(t *testing.T, s *Store, in Inode) {
			err := s.kv.Update(context.Background(), func(tx kv.Txn) error {
				in, err := s.getInode(tx, in.Ino)
				if err != nil {
					return err
				}
				in.Flags |= unstamped
				in.Unexported = in.Cached
				return s.putInode(tx, &in)
			})
			if err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.what, func(t *testing.T) {
			s := openStore(t, t.TempDir())
			ctx := context.Background()
			in := cachedImport(t, s)
			if _, err := s.WriteData(ctx, in.Ino, []byte("changed"), 10, false, 1, Limits{}, nil); err != nil {
				t.Fatal(err)
			}
			c.change(t, s, in)
			if freed := evictAll(t, s); freed != 0 {
				t.Fatalf("eviction freed %d bytes of a changed file %s", freed, c.what)
			}
			if got, _ := s.Get(ctx, in.Ino); got.Cached != 3*tier.BlockSize {
				t.Fatalf("the tier holds %d bytes of the file, want all three blocks", got.Cached)
			}
		})
	}
}
