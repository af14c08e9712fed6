package sync

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"syscall"
	"testing"
	"time"

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
	a, bIn := newFile(t, m, "a", body), newFile(t, m, "b", body)
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
	md := objectMetadata(&bIn, m.Fsid(), "a")
	if _, err := b.Put(ctx, "a", bytes.NewReader(body), int64(len(body)), bucket.PutOptions{Metadata: md}); err != nil {
		t.Fatal(err)
	}
	if conflict, _, err := e.deleteIfUnchanged(ctx, &a, old); err != nil || conflict != "" {
		t.Fatalf("delete of the replaced inode's object: conflict %q, %v", conflict, err)
	}
	cur, err := b.Head(ctx, "a", "")
	if err != nil {
		t.Fatalf("the object the replacing file wrote is gone: %v", err)
	}
	if who, _, _ := originOf(cur.Metadata, "a"); who != inodeOrigin(m.Fsid(), bIn.Ino) {
		t.Fatalf("a is now from %q, want the replacing inode", who)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Head(ctx, "a", ""); err != nil {
		t.Fatalf("after the flush, a: %v", err)
	}
}

// Issue 10, item 5: a bucket-side PUT that lands between bucketfs's look
// at an object and its delete of it (the file was removed on the file side)
// must not end under bucketfs's delete marker: the bucket wins, so the PUT
// stays current and counts as a change of the bucket.
func TestADeleteNeverHidesAWriteThatLandedAfterTheLookBeforeIt(t *testing.T) {
	st, m, _, e := newSyncEnv(t)
	ctx := context.Background()
	newFile(t, m, "f", []byte("file side"))
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Remove(ctx, meta.RootIno, "f", false, nil); err != nil {
		t.Fatal(err)
	}
	theirs := []byte("bucket side")
	var landed bucket.ObjectInfo
	e.beforeDelete = func(key string) {
		e.beforeDelete = nil
		var err error
		if landed, err = st.bucket.Put(ctx, key, bytes.NewReader(theirs), int64(len(theirs)), bucket.PutOptions{}); err != nil {
			t.Errorf("the bucket-side put: %v", err)
		}
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if landed.VersionID == "" {
		t.Fatal("the bucket-side put never ran, or the bucket has no versions")
	}
	cur, err := st.bucket.Head(ctx, "f", "")
	if err != nil {
		t.Fatalf("the bucket-side write is hidden under a delete marker: %v", err)
	}
	if cur.VersionID != landed.VersionID {
		t.Fatalf("f is version %s, want the bucket-side write %s", cur.VersionID, landed.VersionID)
	}
	if n := e.conflicts.Load(); n != 1 {
		t.Fatalf("conflicts counted: %d, want 1", n)
	}
	// The file side gets the bucket's version back.
	for deadline := time.Now().Add(10 * time.Second); ; {
		in, err := m.Lookup(ctx, meta.RootIno, "f")
		if err == nil && in.Size == int64(len(theirs)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the file side never got the bucket's f back: %+v, %v", in, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Issue 10, item 6: restoring an older version in the bucket (a copy of
// it over the key) carries bucketfs's own origin tag with that version's
// generation. It is a bucket-side change all the same: the file side
// shows the restored bytes, not the newer ones it exported.
func TestARestoredOlderVersionIsImportedThoughItCarriesOurOriginTag(t *testing.T) {
	st, m, im, e := newSyncEnv(t)
	ctx := context.Background()
	in := newFile(t, m, "f", nil)
	export := func(body string) meta.Object {
		t.Helper()
		if _, err := m.ResizeData(ctx, in.Ino, 0, false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := m.WriteData(ctx, in.Ino, []byte(body), 0, false, 0, meta.Limits{}, nil); err != nil {
			t.Fatal(err)
		}
		if err := e.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		cur, err := m.Get(ctx, in.Ino)
		if err != nil || len(cur.Keys) != 1 {
			t.Fatalf("after the export: %+v, %v", cur.Keys, err)
		}
		return cur.Keys[0]
	}
	v1 := export("version one, the longer one")
	export("version two")
	if _, err := st.bucket.Copy(ctx, "f", "f", v1.VersionID, bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := im.Revalidate(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	got, err := m.Lookup(ctx, meta.RootIno, "f")
	if err != nil || got.Size != v1.Size {
		t.Fatalf("after the restore the file side has size %d (%v), want the restored %d", got.Size, err, v1.Size)
	}
}

// Found by the crash checker: an inode renamed onto a name whose holder
// (another inode of this file system, now replaced) had exported it sends
// its upload conditional on the holder's object; when the holder's own
// delete of that object goes first, as it may, the upload must go ahead
// as a new object. It was taken for a bucket-side delete: a false
// conflict that moved the file to lost+found.
func TestAnUploadOverTheReplacedHoldersObjectGoesAheadAfterItsDelete(t *testing.T) {
	st, m, _, e := newSyncEnv(t)
	ctx := context.Background()
	d, err := m.Create(ctx, meta.RootIno, "k", meta.Inode{Mode: syscall.S_IFDIR | 0o755}, nil)
	if err != nil {
		t.Fatal(err)
	}
	holders, err := st.bucket.Put(ctx, "k/", bytes.NewReader(nil), 0, bucket.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.bucket.Delete(ctx, "k/"); err != nil { // the holder's delete, done first
		t.Fatal(err)
	}
	if _, err := e.upload(ctx, nil, &d, "k/", toObject(holders, 0)); err != nil {
		t.Fatalf("upload over the replaced holder's deleted object: %v", err)
	}
	if _, err := st.bucket.Head(ctx, "k/", ""); err != nil {
		t.Fatalf("after the upload: %v", err)
	}
}

// newSyncEnv is a versioned bucket with an importer and an exporter over
// a new metadata store whose root is listed, as after a mount's start.
func newSyncEnv(t *testing.T) (*uploadStore, *meta.Store, *Importer, *Exporter) {
	t.Helper()
	st := newUploadStore(t)
	m := newMeta(t)
	im := NewImporter(m, st.bucket, ImporterConfig{})
	list(t, m, im, "")
	e := NewExporter(m, st.bucket, im, ExporterConfig{})
	t.Cleanup(e.Wait) // before the store closes (newMeta's cleanup)
	return st, m, im, e
}

// Found by the differential sync test: a file exported as "a", renamed to
// "b" on the file side, and "b" written in the bucket before the rename was
// exported. The conflict at "b" moves the file to lost+found; the object
// at "a" is a name the file side had already given up, and its delete must
// still happen. (The file's whole record of objects was dropped with the
// conflict, so "a" stayed in the bucket and came back on the file side.)
func TestAConflictAfterARenameStillDeletesTheOldName(t *testing.T) {
	st, m, im, e := newSyncEnv(t)
	ctx := context.Background()
	newFile(t, m, "a", []byte("file side"))
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Rename(ctx, meta.RootIno, "a", meta.RootIno, "b", 0, nil); err != nil {
		t.Fatal(err)
	}
	theirs := []byte("bucket side")
	if _, err := st.bucket.Put(ctx, "b", bytes.NewReader(theirs), int64(len(theirs)), bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := im.Revalidate(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.bucket.Head(ctx, "a", ""); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("the object of the old name a: %v, want it deleted", err)
	}
	if head, err := st.bucket.Head(ctx, "b", ""); err != nil || head.Size != int64(len(theirs)) {
		t.Fatalf("b: %+v, %v; want the bucket's version", head, err)
	}
	if n, err := m.LostFoundCount(ctx); err != nil || n != 1 {
		t.Fatalf("lost+found holds %d entries (%v), want 1", n, err)
	}
}

// Found by the differential sync test: a file renamed onto an exported
// name, and before that rename is exported the bucket writes the name again
// with the same bytes (a restore of the version the file side saw: same
// ETag, new version). That write is a bucket-side change: it wins the
// name, and the renamed file goes to lost+found. Compared by ETag it looked
// like the replaced file's own object and was overwritten.
func TestARewriteWithTheSameBytesBeatsARenameOntoTheName(t *testing.T) {
	st, m, im, e := newSyncEnv(t)
	ctx := context.Background()
	same := []byte("the bytes at n")
	newFile(t, m, "n", same)
	newFile(t, m, "src", []byte("file side"))
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Rename(ctx, meta.RootIno, "src", meta.RootIno, "n", 0, nil); err != nil {
		t.Fatal(err)
	}
	theirs, err := st.bucket.Put(ctx, "n", bytes.NewReader(same), int64(len(same)), bucket.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := im.Revalidate(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	head, err := st.bucket.Head(ctx, "n", "")
	if err != nil {
		t.Fatal(err)
	}
	if head.VersionID != theirs.VersionID {
		t.Fatalf("n is version %s, want the bucket's rewrite %s", head.VersionID, theirs.VersionID)
	}
	if n, err := m.LostFoundCount(ctx); err != nil || n != 1 {
		t.Fatalf("lost+found holds %d entries (%v), want the renamed file", n, err)
	}
}

// Found by the differential sync test: a bucket-side copy of an object
// bucketfs exported (CopyObject keeps its metadata, origin tag and all) to
// the name a file is being renamed to. The copy is a bucket-side write at
// that name: it wins, and the renamed file goes to lost+found. Taken for
// "file-side history" by its tag, it was overwritten.
func TestABucketCopyOfOurObjectToAnotherKeyIsABucketSideWrite(t *testing.T) {
	st, m, im, e := newSyncEnv(t)
	ctx := context.Background()
	newFile(t, m, "src", []byte("exported elsewhere"))
	newFile(t, m, "mover", []byte("file side"))
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Rename(ctx, meta.RootIno, "mover", meta.RootIno, "dst", 0, nil); err != nil {
		t.Fatal(err)
	}
	theirs, err := st.bucket.Copy(ctx, "dst", "src", "", bucket.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := im.Revalidate(ctx, "dst"); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	head, err := st.bucket.Head(ctx, "dst", "")
	if err != nil {
		t.Fatal(err)
	}
	if head.VersionID != theirs.VersionID {
		t.Fatalf("dst is version %s, want the bucket's copy %s", head.VersionID, theirs.VersionID)
	}
	if n, err := m.LostFoundCount(ctx); err != nil || n != 1 {
		t.Fatalf("lost+found holds %d entries (%v), want the renamed file", n, err)
	}
	if _, err := st.bucket.Head(ctx, "mover", ""); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("the old name's object: %v, want it deleted", err)
	}
}

// An export of a file with two names uploads the first and is refused at
// the second (the bucket changed it). Before the next attempt, the bucket
// deletes the object just uploaded under the first name. That attempt must
// take the delete for the bucket's change (a conflict: the bucket wins),
// not write the name again as new over the delete: the first attempt's
// upload is recorded although the export as a whole failed. (Found by the
// differential sync test: a bucket-side delete undone by a retried
// export.)
func TestAnExportCutShortRecordsWhatItWrote(t *testing.T) {
	st, m, _, e := newSyncEnv(t)
	ctx := context.Background()
	f := newFile(t, m, "b", []byte("v1"))
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.bucket.Put(ctx, "b", bytes.NewReader([]byte("bucket")), 6, bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteData(ctx, f.Ino, []byte("v2"), 0, false, 0, meta.Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Link(ctx, f.Ino, meta.RootIno, "a", nil); err != nil {
		t.Fatal(err)
	}
	far := time.Now().Add(time.Hour)
	if failed := e.drain(ctx, far); failed != 1 {
		t.Fatalf("first attempt: %d failed, want the conflict at b", failed)
	}
	if _, err := st.bucket.Head(ctx, "a", ""); err != nil {
		t.Fatalf("the first attempt did not upload a: %v", err)
	}
	if err := st.bucket.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	e.drain(ctx, far)
	if cur, err := st.bucket.Head(ctx, "a", ""); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("the bucket's delete of a was undone by the next attempt: %+v, %v", cur, err)
	}
	// The importer resolves both conflicts: a goes (to lost+found), b
	// shows the bucket's version.
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, aErr := m.Lookup(ctx, meta.RootIno, "a")
		b, bErr := m.Lookup(ctx, meta.RootIno, "b")
		if errors.Is(aErr, syscall.ENOENT) && bErr == nil && b.Ino != f.Ino {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the conflicts were not resolved: a %v, b %+v %v", aErr, b, bErr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Found by the cluster differential test (seed 1796698245716205184): a
// file exported at one name, linked at a second name that sorts first,
// then chmod-ed. The export rewrote attributes in place only at the first
// wanted name, which was not exported yet, so it copied the new name from
// the exported one and left that one with the old mode for good. The
// rule: after an export every name of the file carries its attributes.
func TestAnAttributeChangeReachesEveryNameAfterALink(t *testing.T) {
	st, m, _, e := newSyncEnv(t)
	ctx := context.Background()
	in := newFile(t, m, "b", []byte("file side"))
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Link(ctx, in.Ino, meta.RootIno, "a", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Update(ctx, in.Ino, func(cur *meta.Inode) (meta.Change, error) {
		cur.Mode = cur.Mode&^0o777 | 0o750
		return meta.AttrChange, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		h, err := st.bucket.Head(ctx, k, "")
		if err != nil {
			t.Fatal(err)
		}
		if mode, err := strconv.ParseUint(h.Metadata["mode"], 10, 32); err != nil || mode&0o777 != 0o750 {
			t.Errorf("%s carries mode %q after the export, want permissions 0750", k, h.Metadata["mode"])
		}
	}
}
