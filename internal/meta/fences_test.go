package meta

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/testkv"
)

// Issue 21, corner 6 (see fences.go): an import resting on an observation
// of the bucket made before a file-side removal of the name (unlink,
// rmdir, rename away) does not add the name back, by any of the ways an
// import adds names: a listing page, one object, or the directories of a
// new prefix. An observation made after the removal adds it.
func TestAnImportOlderThanAFileSideRemovalDoesNotAddTheNameBack(t *testing.T) {
	ctx := context.Background()
	file := func(name string) Imported {
		return Imported{Name: name, Mode: syscall.S_IFREG | 0o644, Obj: Object{Key: name, ETag: "e", VersionID: "v", Size: 1}}
	}
	for _, c := range []struct {
		name   string
		remove func(s *Store) error
		it     Imported
	}{
		{"unlink", func(s *Store) error { _, err := s.Remove(ctx, RootIno, "x", false, nil); return err }, file("x")},
		{"rename away", func(s *Store) error { _, err := s.Rename(ctx, RootIno, "x", RootIno, "y", 0, nil); return err }, file("x")},
		{"rmdir", func(s *Store) error { _, err := s.Remove(ctx, RootIno, "d", true, nil); return err },
			Imported{Name: "d", Mode: syscall.S_IFDIR, Evidence: []string{"d/z"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openStore(t, t.TempDir())
			mustCreate(t, s, RootIno, "x", syscall.S_IFREG|0o644)
			mustCreate(t, s, RootIno, "d", syscall.S_IFDIR|0o755)
			before := observe(t, s, RootIno)
			if err := c.remove(s); err != nil {
				t.Fatal(err)
			}
			if _, err := s.ImportObject(ctx, before, RootIno, nil, c.it.Name, nil, c.it); !errors.Is(err, syscall.EAGAIN) {
				t.Fatalf("an import older than the removal: %v, want EAGAIN", err)
			}
			n, held, err := s.AddImported(ctx, before, RootIno, []Imported{c.it}, false)
			if err != nil || n != 0 {
				t.Fatalf("a listing page older than the removal added %d names (%v)", n, err)
			}
			if c.it.Obj.Key != "" && !slices.Equal(held, []string{c.it.Obj.Key}) {
				t.Fatalf("the page held back %q, want [%s]", held, c.it.Obj.Key)
			}
			// A key under the removed directory: the directory is one of
			// the new prefix's.
			_, err = s.ImportObject(ctx, before, RootIno, []string{"d"}, "z", nil, file("z"))
			if c.name == "rmdir" && !errors.Is(err, syscall.EAGAIN) {
				t.Fatalf("an import older than the rmdir through a new prefix: %v, want EAGAIN", err)
			}
			if _, err := s.Lookup(ctx, RootIno, c.it.Name); !errors.Is(err, syscall.ENOENT) {
				t.Fatalf("%s is back: %v", c.it.Name, err)
			}
			after := observe(t, s, RootIno)
			if _, err := s.ImportObject(ctx, after, RootIno, nil, c.it.Name, nil, c.it); err != nil {
				t.Fatalf("an import made after the removal: %v", err)
			}
		})
	}
}

// A directory's evidence is the current objects a listing showed under
// it. Objects the file side records for inodes that lost their names (a
// removal the exporter has not carried out), and objects whose record an
// export dropped after the listing (it deleted them), are no evidence:
// the directory they stood for was removed on the file side.
func TestObjectsOfOurOwnRemovalsAreNoEvidenceOfADirectory(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	if _, _, err := s.AddImported(ctx, Observation{}, RootIno, []Imported{{Name: "d", Mode: syscall.S_IFDIR}}, false); err != nil {
		t.Fatal(err)
	}
	d, err := s.Lookup(ctx, RootIno, "d")
	if err != nil {
		t.Fatal(err)
	}
	f := Imported{Name: "f", Mode: syscall.S_IFREG | 0o644, Obj: Object{Key: "d/f", ETag: "e", VersionID: "v", Size: 1}}
	if _, _, err := s.AddImported(ctx, Observation{}, d.Ino, []Imported{f}, true); err != nil {
		t.Fatal(err)
	}
	fin, err := s.Lookup(ctx, d.Ino, "f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(ctx, d.Ino, "f", false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(ctx, RootIno, "d", true, nil); err != nil {
		t.Fatal(err)
	}
	dir := func(evidence ...string) Imported {
		return Imported{Name: "d", Mode: syscall.S_IFDIR, Evidence: evidence}
	}
	importDir := func(o Observation, it Imported) error {
		_, err := s.ImportObject(ctx, o, RootIno, nil, "d", nil, it)
		return err
	}
	obs := observe(t, s, RootIno)
	if err := importDir(obs, dir("d/f")); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("a directory whose only object waits for its delete: %v, want EAGAIN", err)
	}
	if err := s.Forget(ctx, fin.Ino); err != nil { // as the exporter does after the delete
		t.Fatal(err)
	}
	if err := importDir(obs, dir("d/f")); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("a directory whose only object was deleted after the listing: %v, want EAGAIN", err)
	}
	if err := importDir(obs, dir("d/f", "d/theirs")); err != nil {
		t.Fatalf("a directory with an object of the bucket's own: %v", err)
	}
}

// A key whose record an export dropped does not fence the key from an
// import into a directory made at its path since, resting on an
// observation of that directory made after the drop, whether the drop
// came after the old directory was removed (the tombstone names the
// deepest directory on the path then, here the root: the observation reads
// the new directory's ancestors too) or before (it names the old
// directory, gone since: its removal, an event of the root, orders it).
// Before, the bucket's new object at the key waited for the tombstone's
// trim (six minutes), and the differential sync test found the file
// system and the bucket apart.
func TestAKeyDroppedInADirectoryThatIsGoneIsImportedIntoANewOne(t *testing.T) {
	for _, dropFirst := range []bool{false, true} {
		name := "dropped after the rmdir"
		if dropFirst {
			name = "dropped before the rmdir"
		}
		t.Run(name, func(t *testing.T) {
			s := openStore(t, t.TempDir())
			ctx := context.Background()
			f := Imported{Name: "n1", Mode: syscall.S_IFREG | 0o644, Obj: Object{Key: "e/n1", ETag: "e", VersionID: "v1", Size: 1}}
			if _, err := s.ImportObject(ctx, Observation{}, RootIno, []string{"e"}, "n1", nil, f); err != nil {
				t.Fatal(err)
			}
			e := mustLookup(t, s, RootIno, "e")
			fin := mustLookup(t, s, e.Ino, "n1")
			if _, err := s.Remove(ctx, e.Ino, "n1", false, nil); err != nil {
				t.Fatal(err)
			}
			forget := func() {
				if err := s.Forget(ctx, fin.Ino); err != nil { // the exporter deleted e/n1
					t.Fatal(err)
				}
			}
			if dropFirst {
				forget()
			}
			if _, err := s.Remove(ctx, RootIno, "e", true, nil); err != nil {
				t.Fatal(err)
			}
			if !dropFirst {
				forget()
			}
			// The bucket gets e/n1 again: a listing of the root brings e
			// back, a listing of e brings n1.
			dir := Imported{Name: "e", Mode: syscall.S_IFDIR, Evidence: []string{"e/n1"}}
			if _, err := s.ImportObject(ctx, observe(t, s, RootIno), RootIno, nil, "e", nil, dir); err != nil {
				t.Fatalf("e, listed after the delete: %v", err)
			}
			e = mustLookup(t, s, RootIno, "e")
			f.Obj.VersionID = "v2"
			if _, err := s.ImportObject(ctx, observe(t, s, e.Ino), e.Ino, nil, "n1", nil, f); err != nil {
				t.Fatalf("e/n1, listed after the delete, into the new e: %v", err)
			}
			// The fence still holds where it should: an observation of the
			// new e made before a second drop under it.
			before := observe(t, s, e.Ino)
			fin = mustLookup(t, s, e.Ino, "n1")
			if _, err := s.Remove(ctx, e.Ino, "n1", false, nil); err != nil {
				t.Fatal(err)
			}
			forget()
			if _, err := s.ImportObject(ctx, before, e.Ino, nil, "n1", nil, f); !errors.Is(err, syscall.EAGAIN) {
				t.Fatalf("an import older than the second removal: %v, want EAGAIN", err)
			}
		})
	}
}

// An observation of a directory made before a key under it was dropped,
// and the directory removed, still fences the key when the directory's
// removal is what orders the drop: an import of a new directory at the
// path, resting on an observation of the parent older than the removal,
// finds the object no evidence of a bucket-side directory.
func TestADropOrderedByItsDirectorysRemovalStillFencesAnOlderObservation(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	f := Imported{Name: "n1", Mode: syscall.S_IFREG | 0o644, Obj: Object{Key: "e/n1", ETag: "e", VersionID: "v1", Size: 1}}
	if _, err := s.ImportObject(ctx, Observation{}, RootIno, []string{"e"}, "n1", nil, f); err != nil {
		t.Fatal(err)
	}
	e := mustLookup(t, s, RootIno, "e")
	fin := mustLookup(t, s, e.Ino, "n1")
	old := observe(t, s, RootIno)
	if _, err := s.Remove(ctx, e.Ino, "n1", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(ctx, fin.Ino); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(ctx, RootIno, "e", true, nil); err != nil {
		t.Fatal(err)
	}
	dir := Imported{Name: "e2", Mode: syscall.S_IFDIR, Evidence: []string{"e/n1"}}
	if _, err := s.ImportObject(ctx, old, RootIno, nil, "e2", nil, dir); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("a directory whose only evidence was deleted after the listing: %v, want EAGAIN", err)
	}
}

// Tombstones are kept as long as an observation older than them may
// still serve an import, and no longer (see fences.go): an import resting
// on an observation older than the age bound is refused; a tombstone
// seen unchanged for longer than the bound (plus the margin) is trimmed,
// and one that changed since it was first seen is kept.
func TestATombstoneIsTrimmedOnlyWhenNoObservationOlderThanItCanServeAnImport(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	const age = time.Minute
	s, err := Open(ctx, db, Options{ExportDelay: time.Minute, Now: func() time.Time { return now }, MaxObservationAge: age})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		mustCreate(t, s, RootIno, name, syscall.S_IFREG|0o644)
	}
	tombstones := func() (names []string) {
		t.Helper()
		err := db.View(ctx, func(r kv.Reader) error {
			p := nameTombPrefix(RootIno)
			return r.Scan(p, kv.PrefixEnd(p), func(k, v []byte) bool {
				names = append(names, string(k[len(p):]))
				return true
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	trim := func() {
		t.Helper()
		if err := s.TrimFences(ctx); err != nil {
			t.Fatal(err)
		}
	}
	old := observe(t, s, RootIno)
	if _, err := s.Remove(ctx, RootIno, "a", false, nil); err != nil {
		t.Fatal(err)
	}
	trim() // first sighting of a's tombstone
	now = now.Add(age + fenceTrimMargin)
	mustCreate(t, s, RootIno, "b2", syscall.S_IFREG|0o644)
	if _, err := s.Rename(ctx, RootIno, "b2", RootIno, "b", 0, nil); err != nil {
		t.Fatal(err)
	}
	trim() // a's tombstone: not yet longer than the bound; b2's: first sighting
	if got := tombstones(); !slices.Equal(got, []string{"a", "b2"}) {
		t.Fatalf("tombstones %q after a trim within the bound, want [a b2]", got)
	}
	if _, err := s.ImportObject(ctx, old, RootIno, nil, "c", nil, Imported{Name: "c", Mode: syscall.S_IFREG | 0o644}); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("an import resting on an observation older than the bound: %v, want EAGAIN", err)
	}
	if _, _, err := s.AddImported(ctx, old, RootIno, []Imported{{Name: "c", Mode: syscall.S_IFREG | 0o644}}, false); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("a listing page resting on an observation older than the bound: %v, want EAGAIN", err)
	}
	now = now.Add(time.Second)
	mustCreate(t, s, RootIno, "b2", syscall.S_IFREG|0o644)
	if _, err := s.Remove(ctx, RootIno, "b2", false, nil); err != nil { // b2's tombstone changes
		t.Fatal(err)
	}
	trim()
	if got := tombstones(); !slices.Equal(got, []string{"b2"}) {
		t.Fatalf("tombstones %q, want [b2]: a's is past the bound, b2's changed since it was seen", got)
	}
	now = now.Add(age + fenceTrimMargin + time.Second)
	trim()
	if got := tombstones(); len(got) != 0 {
		t.Fatalf("tombstones %q left after every observation older than them expired", got)
	}
	fresh := observe(t, s, RootIno)
	if _, err := s.ImportObject(ctx, fresh, RootIno, nil, "a", nil, Imported{Name: "a", Mode: syscall.S_IFREG | 0o644}); err != nil {
		t.Fatalf("an import resting on a new observation: %v", err)
	}
}

func mustLookup(t *testing.T, s *Store, dir Ino, name string) Inode {
	t.Helper()
	in, err := s.Lookup(context.Background(), dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return in
}
