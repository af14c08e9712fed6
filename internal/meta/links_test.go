package meta

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/testkv"
)

// loadDump writes the keys and values of a dump file (hex key, a space,
// hex value a line; # starts a comment) into a new store in dir.
func loadDump(t *testing.T, dir, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var keys, values [][]byte
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kh, vh, _ := strings.Cut(line, " ")
		k, err1 := hex.DecodeString(kh)
		v, err2 := hex.DecodeString(vh)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatalf("%s: %q: %v", path, line, err)
		}
		keys, values = append(keys, k), append(values, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	db, err := testkv.Open(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(context.Background(), func(tx kv.Txn) error {
		for i := range keys {
			if err := tx.Set(keys[i], values[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkNames checks the invariant of addLink over the whole store: the
// names links returns of each inode are exactly the directory entries that
// name it, each once, and a file's Nlink counts them.
func checkNames(t *testing.T, s *Store) { checkNamesOf(t, s, false) }

// checkNamesOf is checkNames; with newOnly, for a store this version made,
// it checks as well that every directory with a name has it in its
// record and no link record.
func checkNamesOf(t *testing.T, s *Store, newOnly bool) {
	t.Helper()
	want := map[Ino][]Link{}
	var inos []Ino
	err := s.kv.View(context.Background(), func(r kv.Reader) error {
		err := r.Scan([]byte{pEntry}, []byte{pEntry + 1}, func(k, v []byte) bool {
			child, _, ok := decodeEntry(v)
			if !ok {
				t.Errorf("the entry %q has the value %x", k, v)
			}
			want[child] = append(want[child], Link{Parent: Ino(kv.Uint64(k[1:])), Name: string(k[9:])})
			return true
		})
		if err != nil {
			return err
		}
		if err := r.Scan([]byte{pInode}, []byte{pInode + 1}, func(k, v []byte) bool {
			inos = append(inos, Ino(kv.Uint64(k[1:])))
			return true
		}); err != nil {
			return err
		}
		for _, ino := range inos {
			got, err := links(r, ino)
			if err != nil {
				return err
			}
			w := want[ino]
			sortLinks(got)
			sortLinks(w)
			if !slices.Equal(got, w) {
				t.Errorf("inode %d has the names %v, its directory entries are %v", ino, got, w)
			}
			in, err := s.getInode(r, ino)
			if err != nil {
				return err
			}
			if !in.IsDir() && int(in.Nlink) != len(w) {
				t.Errorf("inode %d has Nlink %d and %d names", ino, in.Nlink, len(w))
			}
			n := 0
			if err := r.Scan(linkPrefix(ino), kv.PrefixEnd(linkPrefix(ino)), func(k, v []byte) bool {
				n++
				return true
			}); err != nil {
				return err
			}
			if in.IsDir() && in.link.Parent != 0 && n > 0 {
				t.Errorf("directory %d has its name %v in its record and %d link records", ino, in.link, n)
			}
			if in.IsDir() && len(w) > 0 && newOnly && (in.link.Parent == 0 || n > 0) {
				t.Errorf("directory %d of a new store has the name %v in its record and %d link records", ino, in.link, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(inos) == 0 {
		t.Fatal("no inodes")
	}
}

func sortLinks(ls []Link) {
	slices.SortFunc(ls, func(a, b Link) int {
		if a.Parent != b.Parent {
			return int(a.Parent) - int(b.Parent)
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// rows counts the keys of the store with the first byte prefix.
func rows(t *testing.T, s *Store, prefix byte) int {
	t.Helper()
	n := 0
	err := s.kv.View(context.Background(), func(r kv.Reader) error {
		return r.Scan([]byte{prefix}, []byte{prefix + 1}, func(k, v []byte) bool {
			n++
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mustPaths(t *testing.T, s *Store, ino Ino) []string {
	t.Helper()
	p, _, err := s.Paths(context.Background(), ino)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(p)
	return p
}

// A store written by the bucketfs before this one (main at b0597b9:
// version 2 inode records, every name a link record) opens and works:
// its files show their names, paths, data, keys and xattrs; unlink,
// rename, link and create work on its inodes, old names and new mixed;
// and it opens again after.
func TestAStoreWrittenBeforeNamesInRecordsOpensAndWorks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	loadDump(t, dir, "testdata/store-main-b0597b9.kvdump")
	db, err := testkv.Open(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			db.Close()
		}
	})
	s, err := Open(ctx, db, Options{ExportDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if rows(t, s, pLink) != 16 {
		t.Fatalf("the old store has %d link records, want 16", rows(t, s, pLink))
	}
	checkNames(t, s)

	d := mustLookup(t, s, RootIno, "d")
	f := mustLookup(t, s, d.Ino, "f")
	if g, h := mustLookup(t, s, d.Ino, "g"), mustLookup(t, s, RootIno, "h"); g.Ino != f.Ino || h.Ino != f.Ino || f.Nlink != 3 {
		t.Fatalf("d/f %d, d/g %d, h %d, nlink %d", f.Ino, g.Ino, h.Ino, f.Nlink)
	}
	if p := mustPaths(t, s, f.Ino); !slices.Equal(p, []string{"d/f", "d/g", "h"}) {
		t.Fatalf("paths of d/f: %q", p)
	}
	buf := make([]byte, 64)
	if _, n, _, err := s.ReadData(ctx, f.Ino, buf, 0); err != nil || string(buf[:n]) != "hello, main" {
		t.Fatalf("data of d/f: %q, %v", buf[:n], err)
	}
	if v, err := s.GetXattr(ctx, f.Ino, "user.k"); err != nil || string(v) != "v" {
		t.Fatalf("xattr of d/f: %q, %v", v, err)
	}
	if len(f.Keys) != 3 || f.Keys[2].Key != "h" || f.Dirty() {
		t.Fatalf("d/f's keys %+v, gen %d exported %d", f.Keys, f.Gen, f.ExportedGen)
	}
	two := mustLookup(t, s, d.Ino, "two")
	if p := mustPaths(t, s, two.Ino); !slices.Equal(p, []string{"d/two"}) || two.Nlink != 1 {
		t.Fatalf("paths of d/two: %q, nlink %d", p, two.Nlink)
	}
	if p := mustPaths(t, s, mustLookup(t, s, RootIno, "r1").Ino); !slices.Equal(p, []string{"r1"}) {
		t.Fatalf("paths of r1: %q", p)
	}
	imp := mustLookup(t, s, RootIno, "imp")
	if imp.Base.ETag != `"d41d8cd98f00b204e9800998ecf8427e"` || imp.Base.VersionID != "01M98PN8FPS8MC9811AFR9PMMW" || len(imp.Keys) != 1 || imp.Keys[0] != imp.Base {
		t.Fatalf("imp: %+v", imp)
	}
	idir := mustLookup(t, s, RootIno, "idir")
	x1 := mustLookup(t, s, idir.Ino, "x1")
	if owner, ok, err := s.KeyOwner(ctx, "idir/x1"); err != nil || !ok || owner.Ino != x1.Ino {
		t.Fatalf("owner of idir/x1: %d %v %v", owner.Ino, ok, err)
	}
	if p := mustPaths(t, s, mustLookup(t, s, mustLookup(t, s, mustLookup(t, s, RootIno, "p").Ino, "q").Ino, "deep").Ino); !slices.Equal(p, []string{"p/q/deep"}) {
		t.Fatalf("paths of p/q/deep: %q", p)
	}

	// Changes to the old inodes: names in link records go, and new ones
	// come, in the record or as link records.
	if _, err := s.Remove(ctx, d.Ino, "g", false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rename(ctx, RootIno, "h", d.Ino, "h2", 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Link(ctx, f.Ino, RootIno, "new", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(ctx, d.Ino, "f", false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rename(ctx, idir.Ino, "x1", RootIno, "x1moved", 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rename(ctx, RootIno, "d", idir.Ino, "d", 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rename(ctx, RootIno, "r1", RootIno, "imp", RenameExchange, nil); err != nil {
		t.Fatal(err)
	}
	c := mustCreate(t, s, d.Ino, "c", syscall.S_IFREG|0o644)
	if _, err := s.Link(ctx, c.Ino, RootIno, "c2", nil); err != nil {
		t.Fatal(err)
	}
	checkNames(t, s)
	if p := mustPaths(t, s, f.Ino); !slices.Equal(p, []string{"idir/d/h2", "new"}) {
		t.Fatalf("paths of the old d/f: %q", p)
	}
	if p := mustPaths(t, s, c.Ino); !slices.Equal(p, []string{"c2", "idir/d/c"}) {
		t.Fatalf("paths of c: %q", p)
	}
	if p := mustPaths(t, s, two.Ino); !slices.Equal(p, []string{"idir/d/two"}) {
		t.Fatalf("paths of two: %q", p)
	}

	// It opens again, as it is.
	closed = true
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	checkNames(t, s)
	if p := mustPaths(t, s, f.Ino); !slices.Equal(p, []string{"idir/d/h2", "new"}) {
		t.Fatalf("paths of the old d/f after a reopen: %q", p)
	}
}

// A file made now, and a directory, keep their one name in their record:
// no link record; a second name is one, and the first name's removal
// leaves the second as the only one.
func TestAFileWithOneNameHasNoLinkRecord(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	base := rows(t, s, pLink)
	dir := mustCreate(t, s, RootIno, "dir", syscall.S_IFDIR|0o755)
	a := mustCreate(t, s, dir.Ino, "a", syscall.S_IFREG|0o644)
	if _, err := s.ImportObject(ctx, Observation{}, dir.Ino, []string{"m"}, "b", nil, importedFile("b", "dir/m/b")); err != nil {
		t.Fatal(err)
	}
	if n := rows(t, s, pLink); n != base {
		t.Fatalf("%d link records for two files and two directories with one name each", n-base)
	}
	if _, err := s.Link(ctx, a.Ino, RootIno, "a2", nil); err != nil {
		t.Fatal(err)
	}
	if n := rows(t, s, pLink); n != base+1 {
		t.Fatalf("%d link records after a second name, want 1", n-base)
	}
	if _, err := s.Remove(ctx, dir.Ino, "a", false, nil); err != nil {
		t.Fatal(err)
	}
	if p := mustPaths(t, s, a.Ino); !slices.Equal(p, []string{"a2"}) {
		t.Fatalf("paths: %q", p)
	}
	checkNames(t, s)
}

// Random sequences of create, link, unlink, rename (plain, over an
// existing name, exchange), rmdir and moves into lost+found keep the
// invariant of addLink: an inode's names are its directory entries.
func TestRandomNameChangesKeepEveryInodesNamesItsEntries(t *testing.T) {
	seed := seedOf(t)
	r := rand.New(rand.NewPCG(seed, 0))
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	s := openStoreAt(t, time.Minute, &now)
	dirs := []Ino{RootIno}
	for i := range 3 {
		dirs = append(dirs, mustCreate(t, s, RootIno, fmt.Sprintf("d%d", i), syscall.S_IFDIR|0o755).Ino)
	}
	names := []string{"a", "b", "c", "e"}
	pick := func() (Ino, string) { return dirs[r.IntN(len(dirs))], names[r.IntN(len(names))] }
	var done [8]int // the steps of each kind that changed something
	for i := range 1000 {
		p, n := pick()
		var err error
		kind := r.IntN(8)
		switch kind {
		case 0:
			_, err = s.Create(ctx, p, n, Inode{Mode: syscall.S_IFREG | 0o644}, nil)
		case 1:
			_, err = s.Create(ctx, p, n, Inode{Mode: syscall.S_IFDIR | 0o755}, nil)
		case 2:
			var in Inode
			if in, err = s.Lookup(ctx, p, n); err == nil {
				p2, n2 := pick()
				_, err = s.Link(ctx, in.Ino, p2, n2, nil)
			}
		case 3:
			_, err = s.Remove(ctx, p, n, r.IntN(2) == 0, nil)
		case 4, 5:
			p2, n2 := pick()
			_, err = s.Rename(ctx, p, n, p2, n2, []uint32{0, 0, RenameExchange, RenameNoReplace}[r.IntN(4)], nil)
		case 6:
			_, err = s.ImportObject(ctx, Observation{}, p, nil, n, nil, importedFile(n, fmt.Sprintf("k%d", i)))
		case 7:
			var in Inode
			if in, err = s.Lookup(ctx, p, n); err == nil {
				err = s.MoveToLostFound(ctx, p, n, &in, fmt.Sprintf("lf%d", i), "")
			}
		}
		if err != nil && !isExpected(err) {
			t.Fatalf("seed %d: step %d: %v", seed, i, err)
		}
		if err == nil {
			done[kind]++
		}
		if i%50 == 0 {
			checkNamesOf(t, s, true)
		}
	}
	checkNamesOf(t, s, true)
	t.Logf("steps that changed something, by kind: %v", done)
	for kind, n := range done {
		if n == 0 {
			t.Errorf("seed %d: no step of kind %d changed anything", seed, kind)
		}
	}
}

func isExpected(err error) bool {
	for _, e := range []error{syscall.ENOENT, syscall.EEXIST, syscall.ENOTDIR, syscall.EISDIR, syscall.ENOTEMPTY,
		syscall.EINVAL, syscall.EPERM, syscall.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
