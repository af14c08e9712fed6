package meta

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"testing"
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
			before := s.Observe()
			defer before.End()
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
			after := s.Observe()
			defer after.End()
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
	obs := s.Observe()
	defer obs.End()
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

// Records of removals are kept only while an observation older than them
// is open: a removal with none open leaves nothing, and the end of the
// last observation drops what was kept.
func TestFenceRecordsLastOnlyWhileAnOlderObservationIsOpen(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	for _, name := range []string{"a", "b", "c"} {
		mustCreate(t, s, RootIno, name, syscall.S_IFREG|0o644)
	}
	remove := func(name string) {
		t.Helper()
		if _, err := s.Remove(ctx, RootIno, name, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	records := func() int {
		s.fences.mu.Lock()
		defer s.fences.mu.Unlock()
		return len(s.fences.log) + len(s.fences.removed) + len(s.fences.dropped)
	}
	remove("a")
	if n := records(); n != 0 {
		t.Fatalf("%d records with no observation open", n)
	}
	first := s.Observe()
	remove("b")
	second := s.Observe()
	remove("c")
	if !first.removedSince(RootIno, "b") || second.removedSince(RootIno, "b") || !second.removedSince(RootIno, "c") {
		t.Fatal("the records do not tell which removals came after which observation")
	}
	first.End()
	if first.removedSince(RootIno, "a") || !second.removedSince(RootIno, "c") {
		t.Fatal("ending the older observation dropped a record the newer one needs")
	}
	s.fences.mu.Lock()
	_, kept := s.fences.removed[nameRef{RootIno, "b"}]
	s.fences.mu.Unlock()
	if kept {
		t.Fatal("the removal of b, older than every open observation, is still recorded")
	}
	second.End()
	if n := records(); n != 0 {
		t.Fatalf("%d records after the last observation ended", n)
	}
}
