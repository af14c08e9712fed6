package fuse_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"bucketfs/internal/meta"
	"bucketfs/internal/s3test"
)

// currentKeys lists the bucket's current objects under prefix, as a plain
// S3 client sees them.
func (e *env) currentKeys(prefix string) []string {
	e.t.Helper()
	var keys []string
	p := s3.NewListObjectsV2Paginator(e.s3, &s3.ListObjectsV2Input{Bucket: &e.bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		for _, o := range page.Contents {
			keys = append(keys, *o.Key)
		}
	}
	slices.Sort(keys)
	return keys
}

// userNames lists the directory dir of the mount, without lost+found.
func (e *env) userNames(dir string) []string {
	e.t.Helper()
	return slices.DeleteFunc(listNames(e.t.(*testing.T), e.path(dir)), func(n string) bool {
		return n == e.eng.Meta.LostFoundName()
	})
}

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// Issue 10, item 13: an export whose inode or path is gone is settled,
// never retried. Directories removed bottom up, with or without an export
// of them first and with a rename between, leave the queue empty without a
// failed export, and the bucket holds nothing under them.
func TestExportsOfARemovedTreeSettle(t *testing.T) {
	for _, tc := range []struct {
		name     string
		exported bool // flushed once before the removals
		file     bool // a file in the innermost directory
		renameTo string
	}{
		{name: "exported"},
		{name: "exported with a file", exported: true, file: true},
		{name: "exported then renamed", exported: true, renameTo: "E"},
		{name: "never exported", file: true},
		{name: "never exported, renamed", file: true, renameTo: "E"},
		{name: "exported dirs", exported: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
			mkdir(t, e.path("D"))
			mkdir(t, e.path("D/sub"))
			if tc.file {
				writeFile(t, e.path("D/sub/f"), []byte("f"))
			}
			if tc.exported {
				e.flush()
				if len(e.currentKeys("D/")) == 0 {
					t.Fatal("nothing exported under D/")
				}
			}
			top := "D"
			if tc.renameTo != "" {
				if err := os.Rename(e.path("D"), e.path(tc.renameTo)); err != nil {
					t.Fatal(err)
				}
				top = tc.renameTo
			}
			if tc.file {
				remove(t, e.path(top+"/sub/f"))
			}
			remove(t, e.path(top+"/sub"))
			remove(t, e.path(top))
			e.flush()
			if n := e.eng.Exporter.Stats().Failures; n != 0 {
				t.Fatalf("%d exports failed", n)
			}
			for _, p := range []string{"D/", "E/"} {
				if keys := e.currentKeys(p); len(keys) != 0 {
					t.Fatalf("the bucket still holds %v", keys)
				}
			}
		})
	}
}

// Issue 10, item 12: a directory the file side made is polled like any
// other, before its own export: an object put under it through S3 shows up
// at the next poll.
func TestANewDirectoryIsPolledBeforeItsExport(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(100*time.Millisecond), withRevalidateTTL(-1))
	mkdir(t, e.path("w7"))
	mkdir(t, e.path("w7/in"))
	listNames(t, e.path("w7"))
	listNames(t, e.path("w7/in"))
	e.put("w7/x", []byte("from s3"), nil)
	e.put("w7/in/y", []byte("deeper"), nil)
	eventually(t, "w7/x to show up", func() bool { return readsAs(e.path("w7/x"), []byte("from s3")) })
	eventually(t, "w7/in/y to show up", func() bool { return readsAs(e.path("w7/in/y"), []byte("deeper")) })
	if got := e.currentKeys("w7/"); !slices.Equal(got, []string{"w7/in/y", "w7/x"}) {
		t.Fatalf("bucket holds %v before any export", got)
	}
}

// Issue 10, item 11: changes made in the bucket while bucketfs was down
// show after a start, in directories listed before the stop: a new name
// opens at once, readdir lists it, and a name deleted meanwhile is gone.
func TestChangesMadeWhileDownShowAfterAStart(t *testing.T) {
	e := newEnv(t, withPoll(-1), withRevalidateTTL(-1))
	e.put("dir/a", []byte("a"), nil)
	e.put("dir/b", []byte("b"), nil)
	mkdir(t, e.path("mine"))
	if got := listNames(t, e.path("dir")); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("dir lists %v", got)
	}
	listNames(t, e.path("mine"))
	e.stop()
	e.put("dir/new", []byte("while down"), nil)
	e.put("mine/x", []byte("into a file-side directory"), nil)
	e.deleteObject("dir/b")
	e.start()
	if !readsAs(e.path("dir/new"), []byte("while down")) {
		t.Fatal("dir/new does not open right after the start")
	}
	if !readsAs(e.path("mine/x"), []byte("into a file-side directory")) {
		t.Fatal("mine/x does not open right after the start")
	}
	if got := listNames(t, e.path("dir")); !slices.Equal(got, []string{"a", "new"}) {
		t.Fatalf("after the start dir lists %v, want [a new]", got)
	}
}

// Issue 10, item 3: a child exported before its new directory was, then the
// directory renamed: the bucket ends with the child under the new name only.
func TestRenamingADirectoryExportedOnlyThroughItsChildMovesTheChild(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
	mkdir(t, e.path("d"))
	mkdir(t, e.path("d/sub"))
	writeFile(t, e.path("d/a"), []byte("a"))
	writeFile(t, e.path("d/sub/b"), []byte("b"))
	for _, p := range []string{"d/a", "d/sub/b"} {
		if err := e.eng.Exporter.FlushInode(context.Background(), meta.Ino(statIno(t, e.path(p)))); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.currentKeys(""); !slices.Equal(got, []string{"d/a", "d/sub/b"}) {
		t.Fatalf("before the rename the bucket holds %v", got)
	}
	if err := os.Rename(e.path("d"), e.path("e")); err != nil {
		t.Fatal(err)
	}
	e.flush()
	if got := e.currentKeys(""); !slices.Equal(got, []string{"e/", "e/a", "e/sub/", "e/sub/b"}) {
		t.Fatalf("after the rename the bucket holds %v", got)
	}
}

// Issue 10, item 7: a file renamed (or unlinked) while its first upload is
// in flight leaves no ghost at the old name on either side, with events on.
func TestAFileRenamedDuringItsFirstUploadLeavesNoGhost(t *testing.T) {
	for _, tc := range []struct {
		name          string
		unlink, after bool
	}{
		{name: "renamed"},
		{name: "unlinked", unlink: true},
		{name: "renamed once stored", after: true},
		{name: "unlinked once stored", unlink: true, after: true},
	} {
		unlink := tc.unlink
		t.Run(tc.name, func(t *testing.T) {
			p := newHoldingProxy(t, s3test.Store(t))
			e := newEnv(t, withEndpoint(p.url), withPoll(-1), withRevalidateTTL(-1))
			forwardEvents(e)
			arrived, release := p.arm("/old", tc.after)
			writeFile(t, e.path("old"), []byte("first"))
			select {
			case <-arrived:
			case <-time.After(20 * time.Second):
				t.Fatal("the export of old never started")
			}
			if unlink {
				remove(t, e.path("old"))
			} else if err := os.Rename(e.path("old"), e.path("new")); err != nil {
				t.Fatal(err)
			}
			close(release)
			e.flush()
			want := []string{"new"}
			if unlink {
				want = nil
			}
			if got := e.currentKeys(""); !slices.Equal(got, want) {
				t.Fatalf("the bucket holds %v, want %v (exporter %+v)", got, want, e.eng.Exporter.Stats())
			}
			// Let the events of the upload and its undoing arrive.
			eventually(t, "the events to be handled", func() bool { return e.eng.Importer.EventStats().Pending == 0 })
			if got := e.userNames(""); !slices.Equal(got, want) {
				t.Fatalf("the mount lists %v, want %v", got, want)
			}
			if lf := e.lostFound(); len(lf) != 0 {
				t.Fatalf("lost+found holds %v", lf)
			}
		})
	}
}

// Issue 10, item 8 (clean case): a bucket-side overwrite of one name of a
// hard-linked file changes that name only; the other names keep their
// bytes on both sides, and nothing is exported or counted as a conflict.
func TestABucketOverwriteOfOneHardLinkChangesThatNameOnly(t *testing.T) {
	e := newEnv(t, withPoll(-1), withRevalidateTTL(-1))
	forwardEvents(e)
	writeFile(t, e.path("a"), []byte("linked"))
	if err := os.Link(e.path("a"), e.path("b")); err != nil {
		t.Fatal(err)
	}
	e.flush()
	e.put("a", []byte("from the bucket"), nil)
	eventually(t, "a to show the bucket's version", func() bool { return readsAs(e.path("a"), []byte("from the bucket")) })
	if got := readFile(t, e.path("b")); string(got) != "linked" {
		t.Fatalf("b reads %q", got)
	}
	if statIno(t, e.path("a")) == statIno(t, e.path("b")) {
		t.Fatal("a and b are still one inode")
	}
	if n := stat(t, e.path("b")).Nlink; n != 1 {
		t.Fatalf("b has %d links", n)
	}
	e.flush()
	if body, _, _ := e.get("b"); string(body) != "linked" {
		t.Fatalf("the bucket's b holds %q", body)
	}
	if body, _, _ := e.get("a"); string(body) != "from the bucket" {
		t.Fatalf("the bucket's a holds %q", body)
	}
	if s := e.eng.Exporter.Stats(); s.Conflicts != 0 {
		t.Fatalf("%d conflicts counted", s.Conflicts)
	}
	if lf := e.lostFound(); len(lf) != 0 {
		t.Fatalf("lost+found holds %v", lf)
	}
	// A later write through b stays b's.
	writeFile(t, e.path("b"), []byte("b again"))
	e.flush()
	if body, _, _ := e.get("a"); string(body) != "from the bucket" {
		t.Fatalf("after a write to b the bucket's a holds %q", body)
	}
}

// Issue 10, item 8 (dirty case): one name of a hard-linked file with
// unexported writes changes in the bucket. The bucket's version takes that
// name; lost+found keeps the file as it was, as its own copy that later
// writes through the other name do not change; the other name keeps the
// file and exports it.
func TestAConflictOnOneHardLinkKeepsAFrozenCopy(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
	forwardEvents(e)
	writeFile(t, e.path("a"), []byte("linked"))
	if err := os.Link(e.path("a"), e.path("b")); err != nil {
		t.Fatal(err)
	}
	e.flush()
	writeFile(t, e.path("b"), []byte("file side"))
	e.put("a", []byte("from the bucket"), nil)
	eventually(t, "a to show the bucket's version", func() bool { return readsAs(e.path("a"), []byte("from the bucket")) })
	lf := e.lostFound()
	if len(lf) != 1 {
		t.Fatalf("lost+found holds %v", lf)
	}
	kept := filepath.Join(e.path(e.eng.Meta.LostFoundName()), lf[0])
	if got := readFile(t, kept); string(got) != "file side" {
		t.Fatalf("lost+found keeps %q", got)
	}
	writeFile(t, e.path("b"), []byte("written later"))
	if got := readFile(t, kept); string(got) != "file side" {
		t.Fatalf("after a write through b, lost+found keeps %q", got)
	}
	if statIno(t, kept) == statIno(t, e.path("b")) {
		t.Fatal("lost+found's copy is b's inode")
	}
	e.flush()
	if body, _, _ := e.get("b"); string(body) != "written later" {
		t.Fatalf("the bucket's b holds %q", body)
	}
	if body, _, _ := e.get("a"); string(body) != "from the bucket" {
		t.Fatalf("the bucket's a holds %q", body)
	}
}

// open(O_CREAT) through a name the kernel still holds for a file the
// bucket deleted makes the file anew, never ENOENT (found by the
// differential sync test). The open's own check with the bucket finds the
// delete here: no events, no polls, and the kernel keeps the entry.
func TestCreatingOverAFileDeletedInTheBucketMakesItAnew(t *testing.T) {
	e := newEnv(t, withPoll(-1), withRevalidateTTL(time.Millisecond))
	writeFile(t, e.path("f"), []byte("first"))
	e.flush()
	if !readsAs(e.path("f"), []byte("first")) { // the kernel holds the entry now
		t.Fatal("f unreadable")
	}
	e.deleteObject("f")
	time.Sleep(5 * time.Millisecond) // past the revalidation TTL: the open asks the bucket
	if err := os.WriteFile(e.path("f"), []byte("second"), 0o644); err != nil {
		t.Fatalf("open(O_CREAT) over a file deleted in the bucket: %v", err)
	}
	if got := readFile(t, e.path("f")); string(got) != "second" {
		t.Fatalf("f reads %q", got)
	}
	e.flush()
	if body, _, _ := e.get("f"); string(body) != "second" {
		t.Fatalf("the bucket's f holds %q", body)
	}
}

// Found by the crash checker (separate store, seed 831851462): a file
// moved off a name, another file exported at that name over its object
// and was then replaced by the first one moving back. The first file's
// record of its old object was stale (the second had written over it, and
// deleted its own object when replaced), and its export took bucketfs's
// own delete for a bucket-side one: a conflict that was not there, the
// file sent to lost+found and the name gone on both sides. Each object
// key is recorded by one inode at a time: recording a key takes it from
// the inode that recorded it before.
func TestAFileMovedBackOntoItsNameAfterAnotherFileExportedThereIsNoConflict(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
	ctx := context.Background()
	flushPath := func(p string) {
		t.Helper()
		if err := e.eng.Exporter.FlushInode(ctx, meta.Ino(statIno(t, e.path(p)))); err != nil {
			t.Fatalf("export of %s: %v", p, err)
		}
	}
	writeFile(t, e.path("f1"), []byte("A, first version"))
	a := statIno(t, e.path("f1"))
	flushPath("f1")
	if err := os.Rename(e.path("f1"), e.path("t0")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.path("t0"), []byte("A, second version"))
	writeFile(t, e.path("x"), []byte("B"))
	b := statIno(t, e.path("x"))
	if err := os.Rename(e.path("x"), e.path("f1")); err != nil {
		t.Fatal(err)
	}
	flushPath("f1") // B's export replaces A's object at f1
	if got, _, _ := e.get("f1"); string(got) != "B" {
		t.Fatalf("the bucket's f1 is %q after B's export, want B", got)
	}
	if err := os.Rename(e.path("t0"), e.path("f1")); err != nil {
		t.Fatal(err)
	}
	// B, replaced, deletes its object; then A exports at f1.
	if err := e.eng.Exporter.FlushInode(ctx, meta.Ino(b)); err != nil && !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("export of the replaced B: %v", err)
	}
	if err := e.eng.Exporter.FlushInode(ctx, meta.Ino(a)); err != nil {
		t.Fatalf("export of A back at f1: %v", err)
	}
	e.flush()
	if got := readFile(t, e.path("f1")); string(got) != "A, second version" {
		t.Fatalf("f1 reads %q on the file side, want A's second version", got)
	}
	if got, _, ok := e.get("f1"); !ok || string(got) != "A, second version" {
		t.Fatalf("the bucket's f1 is %q (present %v), want A's second version", got, ok)
	}
	if lf := e.lostFound(); len(lf) != 0 {
		t.Fatalf("lost+found holds %v: a conflict that was not there", lf)
	}
	if c := e.eng.Exporter.Stats().Conflicts + e.eng.Importer.Stats().Conflicts; c != 0 {
		t.Fatalf("%d conflicts counted, want 0", c)
	}
}

// Found by the differential sync test: an rmdir of a directory listed
// before a restart lists it again first, and that listing found a name
// changed in the bucket. Telling the kernel to drop the name waits for the
// directory's lock, which the kernel holds until the rmdir is answered:
// the mount hung. Cache invalidations never wait inside a request.
func TestRemovingAStaleDirectoryWhoseListingChangesANameDoesNotHang(t *testing.T) {
	e := newEnv(t, withPoll(-1), withRevalidateTTL(-1))
	e.put("e/n0", []byte("first"), nil)
	e.put("e/n1", []byte("gone soon"), nil)
	if got := listNames(t, e.path("e")); !slices.Equal(got, []string{"n0", "n1"}) {
		t.Fatalf("e lists %v", got)
	}
	if got := readFile(t, e.path("e/n0")); string(got) != "first" {
		t.Fatalf("e/n0 reads %q", got)
	}
	e.stop()
	e.put("e/n0", []byte("second"), nil)
	if _, err := e.s3.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &e.bucket, Key: aws.String("e/n1")}); err != nil {
		t.Fatal(err)
	}
	e.start()
	err := bounded(t, "rmdir of a stale directory", func() error { return syscall.Rmdir(e.path("e")) })
	if !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("rmdir e: %v, want ENOTEMPTY (e/n0 is there)", err)
	}
	if got := listNames(t, e.path("e")); !slices.Equal(got, []string{"n0"}) {
		t.Fatalf("e lists %v after the restart, want [n0]", got)
	}
}

// Issue 10's rule for directories: one exists on the file side only if the
// file side made it or the bucket holds a current object under it. A
// directory that came from a prefix goes when the bucket's last object
// under it does; one the file side made stays, empty or not. (Found by
// the differential sync test: an imported directory stayed, empty, after
// the bucket deleted its last object.)
func TestADirectoryTheBucketEmptiedGoesAndOneTheFileSideMadeStays(t *testing.T) {
	e := newEnv(t, withPoll(50*time.Millisecond), withRevalidateTTL(-1))
	e.put("imported/x", []byte("x"), nil)
	e.put("imported/sub/y", []byte("y"), nil)
	if got := e.userNames(""); !slices.Equal(got, []string{"imported"}) {
		t.Fatalf("root lists %v", got)
	}
	if got := listNames(t, e.path("imported")); !slices.Equal(got, []string{"sub", "x"}) {
		t.Fatalf("imported lists %v", got)
	}
	if got := listNames(t, e.path("imported/sub")); !slices.Equal(got, []string{"y"}) {
		t.Fatalf("imported/sub lists %v", got)
	}
	mkdir(t, e.path("made"))
	e.flush()
	for _, k := range []string{"imported/x", "imported/sub/y"} {
		if _, err := e.s3.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &e.bucket, Key: aws.String(k)}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the emptied directory to go", func() bool {
		return slices.Equal(e.userNames(""), []string{"made"})
	})
	e.flush()
	if got := e.currentKeys(""); !slices.Equal(got, []string{"made/"}) {
		t.Fatalf("the bucket holds %v, want [made/]", got)
	}
}

// Issue 10, item 6, on the path the differential sync test found: a
// restore in the bucket of an older version bucketfs wrote (a copy of
// key?versionId=OLD, which carries bucketfs's origin tag), landing after
// the file side replaced the file with a new one. No inode records the
// key then, and the exporter took the restored object for an orphan of
// its own and wrote over it: the bucket's write was lost without a
// conflict. An object of ours that no inode records and no export intent
// names is a bucket-side write.
func TestARestoreOfAnOwnVersionOverAReplacedFileWinsAsABucketWrite(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
	ctx := context.Background()
	writeFile(t, e.path("f"), []byte("X one"))
	x := statIno(t, e.path("f"))
	e.flush()
	_, _, _ = e.get("f")
	old, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &e.bucket, Key: aws.String("f")})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.path("f"), []byte("X two"))
	e.flush()
	// The file side replaces f with a new file.
	writeFile(t, e.path("tmp"), []byte("Y"))
	y := statIno(t, e.path("tmp"))
	if err := os.Rename(e.path("tmp"), e.path("f")); err != nil {
		t.Fatal(err)
	}
	// The bucket side restores X's first version.
	if _, err := e.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &e.bucket, Key: aws.String("f"),
		CopySource: aws.String(e.bucket + "/f?versionId=" + aws.ToString(old.VersionId))}); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.Exporter.FlushInode(ctx, meta.Ino(x)); err != nil && !errors.Is(err, syscall.ENOENT) {
		t.Logf("export of the replaced X: %v", err)
	}
	// Y's export may meet the conflict, or find Y moved to lost+found
	// already by the import X's refused delete asked for.
	e.eng.Exporter.FlushInode(ctx, meta.Ino(y))
	eventually(t, "the restore to show on the file side", func() bool {
		return readsAs(e.path("f"), []byte("X one"))
	})
	if got, _, _ := e.get("f"); string(got) != "X one" {
		t.Fatalf("the bucket's f is %q, want the restored %q", got, "X one")
	}
	lf := e.lostFound()
	if len(lf) != 1 || !readsAs(filepath.Join(e.path(e.eng.Meta.LostFoundName()), lf[0]), []byte("Y")) {
		t.Fatalf("lost+found holds %v, want Y's file", lf)
	}
}

// Found by the file-side-only differential sync test: a hard link whose
// new name comes before the exported one in the export order (names in the
// root before names in subdirectories) was copied from the exported name,
// and the record of the exported name was dropped. The next look at that
// name took the file's own object for a bucket-side change: a conflict,
// with only the file side writing.
func TestANewHardLinkKeepsTheRecordOfTheNameItWasCopiedFrom(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
	mkdir(t, e.path("d"))
	writeFile(t, e.path("d/x"), []byte("one"))
	e.flush()
	if err := os.Link(e.path("d/x"), e.path("y")); err != nil {
		t.Fatal(err)
	}
	e.flush()
	in, err := e.eng.Meta.Get(context.Background(), meta.Ino(statIno(t, e.path("y"))))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, k := range in.Keys {
		keys = append(keys, k.Key)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"d/x", "y"}) {
		t.Fatalf("the linked file records the objects %v, want [d/x y]", keys)
	}
	writeFile(t, e.path("y"), []byte("two"))
	e.flush()
	for _, k := range []string{"d/x", "y"} {
		if got, _, _ := e.get(k); string(got) != "two" {
			t.Fatalf("the bucket's %s is %q, want two", k, got)
		}
	}
	if c := e.eng.Exporter.Stats().Conflicts + e.eng.Importer.Stats().Conflicts; c != 0 {
		t.Fatalf("%d conflicts counted, want 0", c)
	}
}

// Found by the file-side-only differential sync test: a file moved out of
// a directory, and the directory removed, before either was carried out in
// the bucket; a poll of the parent in between saw the prefix (the file's
// object was still there) and imported the directory and the file again,
// which then kept the file's object from being deleted: a name removed on
// the file side came back, with old bytes. A prefix whose current objects
// are all the file side's records of names it no longer has stands for
// removals the exporter has not carried out, and is no directory.
func TestAPollBeforeAMoveAndRmdirAreExportedBringsNothingBack(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
	mkdir(t, e.path("e"))
	mkdir(t, e.path("d"))
	writeFile(t, e.path("e/n0"), []byte("old"))
	e.flush()
	writeFile(t, e.path("e/n0"), []byte("new"))
	if err := os.Rename(e.path("e/n0"), e.path("d/n0")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Rmdir(e.path("e")); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.Importer.PollDir(context.Background(), meta.RootIno); err != nil {
		t.Fatal(err)
	}
	if got := e.userNames(""); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("after a poll the root lists %v, want [d]", got)
	}
	e.flush()
	if got := e.userNames(""); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("after the export the root lists %v, want [d]", got)
	}
	if got := e.currentKeys(""); !slices.Equal(got, []string{"d/", "d/n0"}) {
		t.Fatalf("the bucket holds %v, want [d/ d/n0]", got)
	}
	if got, _, _ := e.get("d/n0"); string(got) != "new" {
		t.Fatalf("the bucket's d/n0 is %q, want new", got)
	}
}
