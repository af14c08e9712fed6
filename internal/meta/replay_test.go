package meta

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/kv/kvreplay"
	"bucketfs/internal/kv/testkv"
)

// The tests here hold meta to kv's rule for callers: a transaction's fn may
// run more than once (a backend retries it after a serialization failure),
// so what it does outside the store happens only for the run that commits.
// kvreplay runs every fn once on a transaction it throws away and then
// again.

// openReplayed opens a store over a kvreplay wrapper with the clock fixed
// at now.
func openReplayed(t *testing.T, replay bool, now time.Time, opt Options) (*Store, *kvreplay.Store) {
	t.Helper()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var rs *kvreplay.Store
	store := db
	if replay {
		rs = kvreplay.New(db, kvreplay.Options{})
		store = rs
	}
	opt.ExportDelay = time.Minute
	opt.Now = func() time.Time { return now }
	s, err := Open(context.Background(), store, opt)
	if err != nil {
		t.Fatal(err)
	}
	return s, rs
}

// keptFiles records the calls of Options.OnKeptInLostFound.
type keptFiles struct{ calls []string }

func (k *keptFiles) kept(ino Ino, name string) {
	k.calls = append(k.calls, fmt.Sprintf("%d %s", ino, name))
}

// deletedInBucketWhileOpen makes the file name in the root, with some
// bytes, and has an import take its last name as the bucket's deletion of
// its object does: the file side still holds it open.
func deletedInBucketWhileOpen(t *testing.T, s *Store, name string) Inode {
	t.Helper()
	ctx := context.Background()
	in := mustCreate(t, s, RootIno, name, syscall.S_IFREG|0o644)
	in, err := s.WriteData(ctx, in.Ino, []byte("file side"), 0, false, 1, Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetKey(ctx, RootIno, name, &in, name, true); err != nil {
		t.Fatal(err)
	}
	if in, err = s.Get(ctx, in.Ino); err != nil || in.Nlink != 0 || !in.Has(DeletedInBucket) {
		t.Fatalf("after the import removed it: %+v, %v; want no link, deleted in the bucket", in, err)
	}
	return in
}

// A file the bucket deleted while the file side held it open goes to
// lost+found when the file side changes it, whichever change that is, and
// Options.OnKeptInLostFound hears of it once, with the name it has there:
// the conflict is counted and announced once, not once per run of the
// transaction.
func TestAFileKeptInLostFoundIsReportedOnceThoughItsTransactionRanTwice(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(s *Store, ino Ino) error
	}{
		{"write", func(s *Store, ino Ino) error {
			_, err := s.WriteData(ctx, ino, []byte("more"), 9, false, 2, Limits{}, nil)
			return err
		}},
		{"truncate", func(s *Store, ino Ino) error {
			_, err := s.ResizeData(ctx, ino, 3, false, nil)
			return err
		}},
		{"punch", func(s *Store, ino Ino) error { return s.PunchData(ctx, ino, 0, 4, 2) }},
		{"chmod", func(s *Store, ino Ino) error {
			_, err := s.Update(ctx, ino, func(in *Inode) (Change, error) {
				in.Mode = in.Type() | 0o600
				return AttrChange, nil
			})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k keptFiles
			s, rs := openReplayed(t, true, time.Unix(1e9, 0), Options{OnKeptInLostFound: k.kept})
			in := deletedInBucketWhileOpen(t, s, "f")
			if err := tc.change(s, in.Ino); err != nil {
				t.Fatal(err)
			}
			ents, err := s.ReadDir(ctx, s.LostFound(), "", 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) != 1 || ents[0].Ino != in.Ino {
				t.Fatalf("lost+found holds %v; want the file %d", ents, in.Ino)
			}
			want := []string{fmt.Sprintf("%d %s", in.Ino, ents[0].Name)}
			if !slices.Equal(k.calls, want) {
				t.Fatalf("OnKeptInLostFound was called %q; want once, %q (%d transactions replayed)",
					k.calls, want, rs.Replays())
			}
		})
	}
}

// A create checks the parent in its transaction, and the check may make
// the new inode take the parent's group and set-group-id bit (vfs's
// mayCreate). Run again after a chmod took the parent's set-group-id bit
// away, the create must start from the template it was given, not from
// the one the thrown-away run changed: the new directory is made as the
// parent is when it commits.
func TestACreateRunAgainStartsFromItsTemplate(t *testing.T) {
	ctx := context.Background()
	s, rs := openReplayed(t, true, time.Unix(1e9, 0), Options{})
	p, err := s.Create(ctx, RootIno, "p", Inode{Mode: syscall.S_IFDIR | syscall.S_ISGID | 0o777, Uid: 1, Gid: 50}, nil)
	if err != nil {
		t.Fatal(err)
	}
	inherit := func(parent, child *Inode) error {
		if parent.Mode&syscall.S_ISGID != 0 && child.Ino == 0 {
			child.Gid = parent.Gid
			if child.IsDir() {
				child.Mode |= syscall.S_ISGID
			}
		}
		return nil
	}
	rs.BetweenRuns(func(ctx context.Context) {
		rs.BetweenRuns(nil)
		if _, err := s.Update(ctx, p.Ino, func(in *Inode) (Change, error) {
			in.Mode &^= syscall.S_ISGID
			return AttrChange, nil
		}); err != nil {
			t.Error(err)
		}
	})
	d, err := s.Create(ctx, p.Ino, "d", Inode{Mode: syscall.S_IFDIR | 0o755, Uid: 2, Gid: 60}, inherit)
	if err != nil {
		t.Fatal(err)
	}
	if d.Gid != 60 || d.Mode&syscall.S_ISGID != 0 {
		t.Fatalf("the directory made after the parent lost its set-group-id bit has gid %d, mode %o; want 60, no S_ISGID",
			d.Gid, d.Mode)
	}
}

// outcome is what a run of replayScenario leaves that does not depend on
// the file system's random id.
type outcome struct {
	tree      string
	queued    int
	usage     Usage
	lostFound int
	kept      int
	freed     int64
	imported  [2]Ino
}

// replayScenario runs operations of every kind on s and returns what they
// left.
func replayScenario(t *testing.T, s *Store, k *keptFiles) outcome {
	t.Helper()
	ctx := context.Background()
	var o outcome
	// Inode numbers are compared by the order they first show up in: a
	// run that did not commit used up the numbers it took (counters.go).
	num := map[Ino]Ino{}
	id := func(ino Ino) Ino {
		if _, ok := num[ino]; !ok {
			num[ino] = Ino(len(num) + 1)
		}
		return num[ino]
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	d := mustCreate(t, s, RootIno, "d", syscall.S_IFDIR|0o755)
	f := mustCreate(t, s, d.Ino, "f", syscall.S_IFREG|0o644)
	_, err := s.WriteData(ctx, f.Ino, []byte(strings.Repeat("x", 10000)), 0, false, 1, Limits{}, nil)
	must(err)
	_, err = s.WriteData(ctx, f.Ino, []byte("tail"), 0, true, 2, Limits{}, nil)
	must(err)
	_, err = s.Link(ctx, f.Ino, RootIno, "g", nil)
	must(err)
	_, err = s.Rename(ctx, d.Ino, "f", RootIno, "h", 0, nil)
	must(err)
	must(s.SetXattr(ctx, f.Ino, "user.a", []byte("1"), 0, nil))
	_, err = s.ResizeData(ctx, f.Ino, 5000, false, nil)
	must(err)
	must(s.PunchData(ctx, f.Ino, 0, 100, 3))
	_, err = s.Remove(ctx, RootIno, "g", false, nil)
	must(err)
	// An export of f and of d, then an import beside them.
	due, err := s.Due(ctx, time.Unix(1e9, 0).Add(time.Hour), 100)
	must(err)
	for _, q := range due {
		in, err := s.Get(ctx, q.Ino)
		must(err)
		_, _, err = s.Synced(ctx, q, in.Gen, func(cur *Inode) {
			if cur.IsRegular() {
				cur.Keys = []Object{{Key: "h", VersionID: "v1", ETag: "e1"}}
				cur.Base = cur.Keys[0]
				cur.Backed = cur.Size
			}
		})
		must(err)
	}
	for _, name := range []string{"i1", "i2"} {
		in, err := s.ImportObject(ctx, Observation{}, d.Ino, []string{"m"}, name, nil,
			Imported{Mode: syscall.S_IFREG | 0o644, Obj: Object{Key: "d/m/" + name, VersionID: "v", ETag: "e", Size: 7}})
		must(err)
		o.imported[name[1]-'1'] = id(in.Ino)
	}
	o.freed, err = s.EvictData(ctx, f.Ino)
	must(err)
	// A conflict the bucket wins while the file is open.
	c := deletedInBucketWhileOpen(t, s, "c")
	_, err = s.WriteData(ctx, c.Ino, []byte("!"), 0, false, 4, Limits{}, nil)
	must(err)
	_, err = s.Secret(ctx, "s")
	must(err)

	m, err := s.Lookup(ctx, d.Ino, "m")
	must(err)
	for _, dir := range []Ino{RootIno, d.Ino, m.Ino} {
		ents, err := s.ReadDir(ctx, dir, "", 100)
		must(err)
		for _, e := range ents {
			if !strings.HasPrefix(e.Name, LostFoundPrefix) {
				o.tree += fmt.Sprintf("%d/%s=%d ", id(dir), e.Name, id(e.Ino))
			}
		}
	}
	o.queued, _, err = s.QueueStats(ctx)
	must(err)
	o.usage, err = s.Usage(ctx)
	must(err)
	o.lostFound, err = s.LostFoundCount(ctx)
	must(err)
	o.kept = len(k.calls)
	return o
}

// Every operation ends the same whether or not its transaction's fn ran
// once more on a transaction that was thrown away: the namespace, the
// queue length, the tier's usage counters, lost+found and what the store
// reports outside it.
func TestOperationsEndAsTheyDoWhenEachTransactionRunsOnce(t *testing.T) {
	now := time.Unix(1e9, 0)
	var once, twice keptFiles
	plain, _ := openReplayed(t, false, now, Options{OnKeptInLostFound: once.kept})
	replayed, rs := openReplayed(t, true, now, Options{OnKeptInLostFound: twice.kept})
	want := replayScenario(t, plain, &once)
	got := replayScenario(t, replayed, &twice)
	if rs.Replays() < 20 {
		t.Fatalf("only %d transactions were replayed", rs.Replays())
	}
	if got != want {
		t.Fatalf("with every transaction run twice:\n%+v\nrun once:\n%+v", got, want)
	}
	if want.kept != 1 || want.lostFound != 1 {
		t.Fatalf("the scenario kept %d files (%d in lost+found); want 1", want.kept, want.lostFound)
	}
}
