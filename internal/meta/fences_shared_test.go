package meta

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/testkv"
)

// observe opens an observation of dir on s, as an importer does before
// its bucket request.
func observe(t *testing.T, s *Store, dir Ino) Observation {
	t.Helper()
	o, err := s.Observe(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func importedFile(name, key string) Imported {
	return Imported{Name: name, Mode: syscall.S_IFREG | 0o644, Obj: Object{Key: key, ETag: "e", VersionID: "v", Size: 1}}
}

// importedDir adds an unlisted directory name to parent from the bucket,
// through s, and returns it.
func importedDir(t *testing.T, s *Store, parent Ino, name string) Inode {
	t.Helper()
	in, err := s.ImportObject(context.Background(), Observation{}, parent, nil, name, nil,
		Imported{Name: name, Mode: syscall.S_IFDIR | 0o755})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// Issue 23 (audit 1.2): with two servers on one store, an import on
// server B resting on an observation made before a removal through server
// A (unlink, rmdir, rename away, the rm -r of a tree) does not bring the
// name back, by any of the ways an import adds names; an observation made
// on B after the removal adds it (a genuine bucket-side object).
func TestAnImportOnOneServerOlderThanARemovalThroughAnotherDoesNotAddTheNameBack(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		remove func(a *Store, w Ino) error
		it     Imported
		// missing, when set, imports it through a new prefix: the
		// directories of missing are added first.
		missing []string
	}{
		{name: "unlink", remove: func(a *Store, w Ino) error { _, err := a.Remove(ctx, w, "x", false, nil); return err },
			it: importedFile("x", "w/x")},
		{name: "rename away", remove: func(a *Store, w Ino) error {
			_, err := a.Rename(ctx, w, "x", RootIno, "elsewhere", 0, nil)
			return err
		}, it: importedFile("x", "w/x")},
		{name: "rmdir", remove: func(a *Store, w Ino) error { _, err := a.Remove(ctx, w, "d", true, nil); return err },
			it: Imported{Name: "d", Mode: syscall.S_IFDIR, Evidence: []string{"w/d/theirs"}}},
		{name: "rm -r", remove: func(a *Store, w Ino) error { return removeTree(ctx, a, w, "t") },
			it: Imported{Name: "t", Mode: syscall.S_IFDIR, Evidence: []string{"w/t/theirs"}}},
		{name: "rm -r, through a new prefix", remove: func(a *Store, w Ino) error { return removeTree(ctx, a, w, "t") },
			it: importedFile("f", "w/t/sub/f"), missing: []string{"t", "sub"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			a, b := twoLoggingServers(t, &now)
			w := importedDir(t, a, RootIno, "w")
			mustCreate(t, a, w.Ino, "x", syscall.S_IFREG|0o644)
			mustCreate(t, a, w.Ino, "d", syscall.S_IFDIR|0o755)
			tdir := mustCreate(t, a, w.Ino, "t", syscall.S_IFDIR|0o755)
			sub := mustCreate(t, a, tdir.Ino, "sub", syscall.S_IFDIR|0o755)
			mustCreate(t, a, sub.Ino, "f", syscall.S_IFREG|0o644)
			mustCreate(t, a, tdir.Ino, "g", syscall.S_IFREG|0o644)

			before := observe(t, b, w.Ino)
			if err := c.remove(a, w.Ino); err != nil {
				t.Fatal(err)
			}
			name := c.it.Name
			if c.missing != nil {
				name = c.missing[0]
			}
			if _, err := b.ImportObject(ctx, before, w.Ino, c.missing, c.it.Name, nil, c.it); !errors.Is(err, syscall.EAGAIN) {
				t.Fatalf("an import on b older than the removal on a: %v, want EAGAIN", err)
			}
			if c.missing == nil {
				n, _, err := b.AddImported(ctx, before, w.Ino, []Imported{c.it}, false)
				if err != nil || n != 0 {
					t.Fatalf("a listing page on b older than the removal on a added %d names (%v)", n, err)
				}
			}
			if _, err := b.Lookup(ctx, w.Ino, name); !errors.Is(err, syscall.ENOENT) {
				t.Fatalf("%s is back: %v", name, err)
			}
			after := observe(t, b, w.Ino)
			if _, err := b.ImportObject(ctx, after, w.Ino, c.missing, c.it.Name, nil, c.it); err != nil {
				t.Fatalf("an import on b made after the removal on a: %v", err)
			}
		})
	}
}

// removeTree removes parent/name and everything under it through s, as
// rm -r does: children first.
func removeTree(ctx context.Context, s *Store, parent Ino, name string) error {
	in, err := s.Lookup(ctx, parent, name)
	if err != nil {
		return err
	}
	if in.IsDir() {
		ents, err := s.ReadDir(ctx, in.Ino, "", 1000)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := removeTree(ctx, s, in.Ino, e.Name); err != nil {
				return err
			}
		}
	}
	_, err = s.Remove(ctx, parent, name, in.IsDir(), nil)
	return err
}

// The exporter on server A deletes the object of a removed file and drops
// its record of the key (Forget) after an importer on server B observed
// the bucket: B's import of that key, as a file or as the evidence of a
// directory, is refused; an observation made after the drop imports it.
func TestAKeyDropOnOneServerFencesAnOlderImportOnAnother(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	a, b := twoLoggingServers(t, &now)
	w := importedDir(t, a, RootIno, "w")
	x, err := a.ImportObject(ctx, Observation{}, w.Ino, nil, "x", nil, importedFile("x", "w/x"))
	if err != nil {
		t.Fatal(err)
	}
	d := importedDir(t, a, w.Ino, "d")
	f, err := a.ImportObject(ctx, Observation{}, d.Ino, nil, "f", nil, importedFile("f", "w/d/f"))
	if err != nil {
		t.Fatal(err)
	}
	// Removed on the file side before b looks; the exporter has not
	// deleted the objects yet.
	if _, err := a.Remove(ctx, w.Ino, "x", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := removeTree(ctx, a, w.Ino, "d"); err != nil {
		t.Fatal(err)
	}
	before := observe(t, b, w.Ino)
	for _, ino := range []Ino{x.Ino, f.Ino} { // the deletes done, the records dropped
		if err := a.Forget(ctx, ino); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.ImportObject(ctx, before, w.Ino, nil, "x", nil, importedFile("x", "w/x")); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("b's import of a key a dropped after b looked: %v, want EAGAIN", err)
	}
	dir := Imported{Name: "d", Mode: syscall.S_IFDIR, Evidence: []string{"w/d/f"}}
	if ours, err := b.OursSince(ctx, before, "w/d/f"); err != nil || !ours {
		t.Fatalf("OursSince of a key a dropped after b looked: %v, %v; want true", ours, err)
	}
	if _, err := b.ImportObject(ctx, before, w.Ino, nil, "d", nil, dir); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("b's import of a directory whose only evidence a dropped after b looked: %v, want EAGAIN", err)
	}
	after := observe(t, b, w.Ino)
	if _, err := b.ImportObject(ctx, after, w.Ino, nil, "x", nil, importedFile("x", "w/x")); err != nil {
		t.Fatalf("b's import of the key put again after the drop: %v", err)
	}
	if _, err := b.ImportObject(ctx, after, w.Ino, nil, "d", nil, dir); err != nil {
		t.Fatalf("b's import of the directory put again after the drop: %v", err)
	}
}

// fenceEvent is one removal (or key drop) or one successful import in the
// history a race records, stamped with tickets of one counter: begin
// before the call, end after it returned.
type fenceEvent struct {
	name       string
	begin, end int64
}

// Removals and key drops through server A race imports through server B;
// the history shows the rule itself: no name B's import added was removed
// (unlink, rmdir, rename away) through A after B's observation ended and
// before the import began, and no key it added was dropped in that span.
func TestRacingImportsOnOneServerNeverBringBackWhatAnotherRemovedAfterTheirObservation(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	a, b := twoLoggingServers(t, &now)
	w := importedDir(t, a, RootIno, "w")
	names := []string{"n0", "n1", "n2", "n3", "n4", "n5"}

	var (
		ticket          atomic.Int64
		mu              sync.Mutex
		removed         = map[string][]fenceEvent{} // by name
		dropped         = map[string][]fenceEvent{} // by key
		importedNames   []fenceEvent                // begin: the observation's end
		importedKeys    []fenceEvent
		stop            atomic.Bool
		wg              sync.WaitGroup
		removalsDone    atomic.Int64
		importsAccepted atomic.Int64
	)
	fail := make(chan error, 2)
	wg.Add(2)
	go func() { // server A: the file side and its exporter
		defer wg.Done()
		defer stop.Store(true)
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		// 400 steps, and on until B had a few imports accepted (up to a
		// deadline): on a fast store A could finish its steps before B's
		// goroutine got to run, and the race proved nothing.
		deadline := time.Now().Add(20 * time.Second)
		for i := 0; i < 400 || importsAccepted.Load() < 5 && time.Now().Before(deadline); i++ {
			name := names[rng.IntN(len(names))]
			in, err := a.Lookup(ctx, w.Ino, name)
			if errors.Is(err, syscall.ENOENT) {
				// Exported once: the key is recorded, as after an export.
				if rng.IntN(2) == 0 {
					_, err = a.ImportObject(ctx, Observation{}, w.Ino, nil, name, nil, importedFile(name, "w/"+name))
				} else {
					_, err = a.Create(ctx, w.Ino, name, Inode{Mode: syscall.S_IFDIR | 0o755}, nil)
				}
				if err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EEXIST) {
					fail <- err
					return
				}
				continue
			}
			if err != nil {
				fail <- err
				return
			}
			begin := ticket.Add(1)
			if rng.IntN(3) == 0 {
				_, err = a.Rename(ctx, w.Ino, name, RootIno, fmt.Sprintf("away-%d", i), 0, nil)
			} else {
				_, err = a.Remove(ctx, w.Ino, name, in.IsDir(), nil)
			}
			end := ticket.Add(1)
			if err != nil {
				fail <- err
				return
			}
			mu.Lock()
			removed[name] = append(removed[name], fenceEvent{name, begin, end})
			mu.Unlock()
			removalsDone.Add(1)
			if !in.IsDir() && rng.IntN(2) == 0 {
				if _, err := a.Rename(ctx, RootIno, fmt.Sprintf("away-%d", i), RootIno, "trash", 0, nil); err == nil {
					_, err = a.Remove(ctx, RootIno, "trash", false, nil)
				}
				begin := ticket.Add(1)
				err := a.Forget(ctx, in.Ino)
				end := ticket.Add(1)
				if err == nil {
					mu.Lock()
					dropped["w/"+name] = append(dropped["w/"+name], fenceEvent{"w/" + name, begin, end})
					mu.Unlock()
				}
			}
		}
	}()
	go func() { // server B: an importer
		defer wg.Done()
		rng := rand.New(rand.NewPCG(uint64(seed), 2))
		for !stop.Load() {
			name := names[rng.IntN(len(names))]
			o, err := b.Observe(ctx, w.Ino)
			if err != nil {
				fail <- err
				return
			}
			observed := ticket.Add(1)
			// The bucket request the import rests on takes a while: let
			// the other server run meanwhile.
			for range rng.IntN(200) {
				runtime.Gosched()
			}
			it := importedFile(name, "w/"+name)
			if rng.IntN(2) == 0 {
				it = Imported{Name: name, Mode: syscall.S_IFDIR, Evidence: []string{"w/" + name + "/theirs"}}
			}
			begin := ticket.Add(1)
			var added bool
			if rng.IntN(2) == 0 {
				_, err = b.ImportObject(ctx, o, w.Ino, nil, name, nil, it)
				added = err == nil
				if errors.Is(err, syscall.EAGAIN) {
					err = nil
				}
			} else {
				var n int
				n, _, err = b.AddImported(ctx, o, w.Ino, []Imported{it}, false)
				added = n == 1
			}
			if err != nil {
				fail <- err
				return
			}
			if added {
				importsAccepted.Add(1)
				mu.Lock()
				importedNames = append(importedNames, fenceEvent{name, observed, begin})
				if it.Obj.Key != "" {
					importedKeys = append(importedKeys, fenceEvent{it.Obj.Key, observed, begin})
				}
				mu.Unlock()
			}
		}
	}()
	wg.Wait()
	close(fail)
	for err := range fail {
		t.Fatal(err)
	}
	check := func(what string, imports []fenceEvent, removals map[string][]fenceEvent) {
		for _, im := range imports {
			for _, r := range removals[im.name] {
				if r.begin > im.begin && r.end < im.end {
					t.Errorf("seed %d: %s %q came back: %s at tickets %d-%d, after the observation (ticket %d) of an import begun at ticket %d",
						seed, what, im.name, what, r.begin, r.end, im.begin, im.end)
				}
			}
		}
	}
	check("removed name", importedNames, removed)
	check("dropped key", importedKeys, dropped)
	if removalsDone.Load() == 0 || importsAccepted.Load() == 0 {
		t.Fatalf("seed %d: a race of %d removals and %d imports proves nothing", seed, removalsDone.Load(), importsAccepted.Load())
	}
	t.Logf("%d removals, %d imports accepted", removalsDone.Load(), importsAccepted.Load())
}

// The revalidation path: server B resolves a key and observes its
// directory in one look (ResolveObserved), then A unlinks the name and its
// exporter drops the key; B's import of what its HEAD showed is refused. A
// look after the removal imports it.
func TestARevalidationOnOneServerResolvedBeforeARemovalThroughAnotherIsRefused(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	a, b := twoLoggingServers(t, &now)
	w := importedDir(t, a, RootIno, "w")
	if _, _, err := a.AddImported(ctx, Observation{}, w.Ino, nil, true); err != nil {
		t.Fatal(err)
	}
	x, err := a.ImportObject(ctx, Observation{}, w.Ino, nil, "x", nil, importedFile("x", "w/x"))
	if err != nil {
		t.Fatal(err)
	}
	res, before, err := b.ResolveObserved(ctx, "w/x")
	if err != nil || res.Parent != w.Ino || res.Child == nil {
		t.Fatalf("resolve w/x on b: %+v, %v", res, err)
	}
	if _, err := a.Remove(ctx, w.Ino, "x", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Forget(ctx, x.Ino); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ImportObject(ctx, before, res.Parent, res.Missing, res.Name, nil, importedFile("x", "w/x")); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("b's revalidation resolved before a's unlink: %v, want EAGAIN", err)
	}
	res, after, err := b.ResolveObserved(ctx, "w/x")
	if err != nil || res.Parent != w.Ino || res.Child != nil {
		t.Fatalf("resolve w/x on b after the unlink: %+v, %v", res, err)
	}
	if _, err := b.ImportObject(ctx, after, res.Parent, res.Missing, res.Name, nil, importedFile("x", "w/x")); err != nil {
		t.Fatalf("b's revalidation resolved after a's unlink: %v", err)
	}
}

// writeRecorder is a kv.Store that notes the fence records (fences.go)
// each transaction writes.
type writeRecorder struct {
	kv.Store
	mu     sync.Mutex
	writes map[string]bool
}

func (w *writeRecorder) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	return w.UpdateSized(ctx, 0, fn)
}

func (w *writeRecorder) UpdateSized(ctx context.Context, size int, fn func(tx kv.Txn) error) error {
	return w.Store.UpdateSized(ctx, size, func(tx kv.Txn) error {
		return fn(&fenceRecordingTxn{Txn: tx, w: w})
	})
}

type fenceRecordingTxn struct {
	kv.Txn
	w *writeRecorder
}

func (t *fenceRecordingTxn) note(key []byte) {
	if len(key) > 0 && (key[0] == pFenceSeq || key[0] == pNameTomb || key[0] == pKeyTomb) {
		t.w.mu.Lock()
		t.w.writes[string(key)] = true
		t.w.mu.Unlock()
	}
}

func (t *fenceRecordingTxn) Set(key, value []byte) error { t.note(key); return t.Txn.Set(key, value) }
func (t *fenceRecordingTxn) Delete(key []byte) error     { t.note(key); return t.Txn.Delete(key) }

// taken returns the fence records written since the last call.
func (w *writeRecorder) taken() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.writes
	w.writes = map[string]bool{}
	return out
}

// The fence records add no key that removals and key drops in different
// directories share: under SERIALIZABLE, removals through two servers in
// two directories do not conflict on them.
func TestFenceRecordsOfDifferentDirectoriesShareNoKey(t *testing.T) {
	ctx := context.Background()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rec := &writeRecorder{Store: db, writes: map[string]bool{}}
	s, err := Open(ctx, rec, Options{ExportDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	inDir := func(d string) map[string]bool {
		t.Helper()
		dir := importedDir(t, s, RootIno, d)
		f, err := s.ImportObject(ctx, Observation{}, dir.Ino, nil, "f", nil, importedFile("f", d+"/f"))
		if err != nil {
			t.Fatal(err)
		}
		mustCreate(t, s, dir.Ino, "g", syscall.S_IFREG|0o644)
		rec.taken()
		if _, err := s.Remove(ctx, dir.Ino, "f", false, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Forget(ctx, f.Ino); err != nil { // drops the key d/f
			t.Fatal(err)
		}
		if _, err := s.Rename(ctx, dir.Ino, "g", dir.Ino, "h", 0, nil); err != nil {
			t.Fatal(err)
		}
		return rec.taken()
	}
	one, two := inDir("one"), inDir("two")
	if len(one) == 0 || len(two) == 0 {
		t.Fatalf("no fence records written: %d, %d", len(one), len(two))
	}
	for k := range one {
		if two[k] {
			t.Fatalf("removals in two directories both wrote %q", k)
		}
	}
}
