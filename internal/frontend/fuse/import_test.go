package fuse_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"bucketfs/internal/engine"
	"bucketfs/internal/s3local"
	"bucketfs/internal/s3test"
)

// withPoll sets the directory poll interval (negative: no polling).
func withPoll(d time.Duration) option { return func(c *engine.Config) { c.PollInterval = d } }

// withRevalidateTTL sets the revalidate-on-open TTL (negative: never).
func withRevalidateTTL(d time.Duration) option { return func(c *engine.Config) { c.RevalidateTTL = d } }

// forwardEvents feeds the store's object events for e's bucket to the
// running engine, as the embedded store does for `bucketfs mount`.
func forwardEvents(e *env) {
	var eng atomic.Pointer[engine.Engine]
	eng.Store(e.eng)
	s3test.Forward(e.t, e.bucket, func(ev s3local.Event) {
		if en := eng.Load(); en != nil {
			en.StoreEvent(ev)
		}
	})
	e.t.Cleanup(func() { eng.Store(nil) })
}

func (e *env) deleteObject(key string) {
	e.t.Helper()
	if _, err := e.s3.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &e.bucket, Key: &key}); err != nil {
		e.t.Fatal(err)
	}
}

// readsAs reports whether path currently reads as want.
func readsAs(path string, want []byte) bool {
	b, err := os.ReadFile(path)
	return err == nil && bytes.Equal(b, want)
}

func gone(path string) bool {
	_, err := os.Stat(path)
	return errors.Is(err, os.ErrNotExist)
}

// lostFound lists lost+found's names.
func (e *env) lostFound() []string {
	e.t.Helper()
	ents, err := os.ReadDir(e.path(e.eng.Meta.LostFoundName()))
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for _, d := range ents {
		names = append(names, d.Name())
	}
	return names
}

func TestBucketSideChangesArriveThroughEvents(t *testing.T) {
	e := newEnv(t, withPoll(-1), withRevalidateTTL(-1))
	forwardEvents(e)
	e.put("dir/keep", []byte("k"), nil)
	if !readsAs(e.path("dir/keep"), []byte("k")) { // lists dir/ once
		t.Fatal("dir/keep unreadable")
	}
	e.put("dir/new.txt", []byte("v1"), nil)
	eventually(t, "a new object to appear", func() bool { return readsAs(e.path("dir/new.txt"), []byte("v1")) })
	e.put("dir/new.txt", []byte("version two"), nil)
	eventually(t, "an overwrite to show", func() bool { return readsAs(e.path("dir/new.txt"), []byte("version two")) })
	e.put("dir/sub/deep.txt", []byte("deep"), nil)
	eventually(t, "a new prefix to appear", func() bool { return readsAs(e.path("dir/sub/deep.txt"), []byte("deep")) })
	e.deleteObject("dir/new.txt")
	eventually(t, "a delete to show", func() bool { return gone(e.path("dir/new.txt")) })
	if n := len(e.lostFound()); n != 0 {
		t.Fatalf("lost+found holds %d entries without any conflict", n)
	}
}

func TestBucketSideChangesArriveThroughPolling(t *testing.T) {
	e := newEnv(t, withPoll(200*time.Millisecond), withRevalidateTTL(-1))
	e.put("p/a", []byte("a"), nil)
	if !readsAs(e.path("p/a"), []byte("a")) {
		t.Fatal("p/a unreadable")
	}
	e.put("p/b", []byte("b"), nil)
	eventually(t, "polling to find a new object", func() bool { return readsAs(e.path("p/b"), []byte("b")) })
	e.put("p/a", []byte("a2"), nil)
	eventually(t, "polling to find an overwrite", func() bool { return readsAs(e.path("p/a"), []byte("a2")) })
	e.deleteObject("p/b")
	eventually(t, "polling to find a delete", func() bool { return gone(e.path("p/b")) })
}

func TestOpenRevalidatesAStaleFile(t *testing.T) {
	e := newEnv(t, withPoll(-1), withRevalidateTTL(time.Millisecond))
	e.put("f", []byte("old"), nil)
	if !readsAs(e.path("f"), []byte("old")) {
		t.Fatal("f unreadable")
	}
	e.put("f", []byte("newer"), nil)
	// No events, no polling: only the open notices. The kernel may keep
	// the old attributes for its attribute timeout, so poll.
	eventually(t, "open to see the new version", func() bool { return readsAs(e.path("f"), []byte("newer")) })
}

func TestWebhookAcceptsS3EventNotifications(t *testing.T) {
	e := newEnv(t, withPoll(-1), withRevalidateTTL(-1))
	e.put("w/a", []byte("a"), nil)
	if !readsAs(e.path("w/a"), []byte("a")) {
		t.Fatal("w/a unreadable")
	}
	srv := httptest.NewServer(e.eng.ListenerHandler())
	t.Cleanup(srv.Close)
	post := func(body string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/events", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.eng.EventsToken())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	e.put("w/with space+plus", []byte("s"), nil)
	body := `{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","eventName":"ObjectCreated:Put",` +
		`"s3":{"bucket":{"name":"` + e.bucket + `"},"object":{"key":"w/with+space%2Bplus","size":1}}}]}`
	if code := post(body); code != http.StatusNoContent {
		t.Fatalf("webhook answered %d", code)
	}
	eventually(t, "the notified object", func() bool { return readsAs(e.path("w/with space+plus"), []byte("s")) })
	for _, bad := range []string{"{", `{"Records":"x"}`} {
		if code := post(bad); code != http.StatusBadRequest {
			t.Fatalf("malformed notification %q answered %d", bad, code)
		}
	}
}

// conflictOnDoc edits c/doc.txt on both sides (the file side's edit stays
// unexported for the hour-long delay), waits for the bucket's version to
// win, and returns lost+found's names.
func conflictOnDoc(t *testing.T, e *env) []string {
	t.Helper()
	e.put("c/doc.txt", []byte("base"), nil)
	if !readsAs(e.path("c/doc.txt"), []byte("base")) {
		t.Fatal("unreadable")
	}
	writeFile(t, e.path("c/doc.txt"), []byte("file side edit")) // dirty for an hour
	e.put("c/doc.txt", []byte("bucket side edit"), nil)
	eventually(t, "the bucket's version to win", func() bool {
		return readsAs(e.path("c/doc.txt"), []byte("bucket side edit"))
	})
	lf := e.lostFound()
	return lf
}

func TestConcurrentChangeMovesTheFileSideVersionToLostFound(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
	forwardEvents(e)
	lf := conflictOnDoc(t, e)
	if len(lf) != 1 || !strings.HasPrefix(lf[0], "c%2Fdoc.txt.") {
		t.Fatalf("lost+found holds %v", lf)
	}
	if !readsAs(e.path(e.eng.Meta.LostFoundName()+"/"+lf[0]), []byte("file side edit")) {
		t.Fatal("the file-side version in lost+found lost its content")
	}
	if s := e.eng.Importer.Stats(); s.Conflicts != 1 {
		t.Fatalf("conflicts counted %d", s.Conflicts)
	}
	// Nothing in lost+found reaches the bucket.
	e.flush()
	if b, _, _ := e.get("c/doc.txt"); string(b) != "bucket side edit" {
		t.Fatalf("bucket holds %q after flush", b)
	}

	// A delete in the bucket of a file that is dirty on the file side.
	e.put("c/del.txt", []byte("base"), nil)
	eventually(t, "c/del.txt", func() bool { return readsAs(e.path("c/del.txt"), []byte("base")) })
	writeFile(t, e.path("c/del.txt"), []byte("unexported"))
	e.deleteObject("c/del.txt")
	eventually(t, "the deleted file to leave", func() bool { return gone(e.path("c/del.txt")) })
	if len(e.lostFound()) != 2 {
		t.Fatalf("lost+found holds %v after a delete conflict", e.lostFound())
	}
}

func TestExportThatFindsTheObjectChangedLetsTheBucketWin(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
	e.put("x.txt", []byte("base"), nil)
	e.put("y.txt", []byte("base"), nil)
	if !readsAs(e.path("x.txt"), []byte("base")) {
		t.Fatal("unreadable")
	}
	writeFile(t, e.path("x.txt"), []byte("file side"))
	e.put("x.txt", []byte("bucket side"), nil) // no events: the export finds out
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e.eng.Exporter.Flush(ctx) // fails on the conflict, which the importer then resolves
	eventually(t, "the bucket's version to win", func() bool { return readsAs(e.path("x.txt"), []byte("bucket side")) })
	if b, _, _ := e.get("x.txt"); string(b) != "bucket side" {
		t.Fatalf("the export overwrote the bucket's change: %q", b)
	}
	eventually(t, "lost+found to hold the file-side version", func() bool { return len(e.lostFound()) == 1 })

	// Deleted on the file side while changed in the bucket: the bucket's
	// version stays.
	if !readsAs(e.path("y.txt"), []byte("base")) {
		t.Fatal("y unreadable")
	}
	if err := os.Remove(e.path("y.txt")); err != nil {
		t.Fatal(err)
	}
	e.put("y.txt", []byte("changed in bucket"), nil)
	e.eng.Exporter.Flush(ctx)
	if b, _, ok := e.get("y.txt"); !ok || string(b) != "changed in bucket" {
		t.Fatalf("the file-side delete removed the bucket's newer version (%q, %v)", b, ok)
	}
	eventually(t, "y.txt to come back with the bucket's version", func() bool {
		return readsAs(e.path("y.txt"), []byte("changed in bucket"))
	})
}

func TestObjectsAddedUnderARenamedDirectorysOldPrefixAreKept(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
	forwardEvents(e)
	e.put("old/a", []byte("a"), nil)
	if !readsAs(e.path("old/a"), []byte("a")) {
		t.Fatal("old/a unreadable")
	}
	if err := os.Rename(e.path("old"), e.path("new")); err != nil {
		t.Fatal(err)
	}
	// The bucket side has not seen the rename yet; someone adds an object
	// under the old prefix.
	e.put("old/added", []byte("late"), nil)
	eventually(t, "the late object under its own name", func() bool { return readsAs(e.path("old/added"), []byte("late")) })
	if !readsAs(e.path("new/a"), []byte("a")) {
		t.Fatal("the renamed directory lost its file")
	}
	e.flush()
	for key, want := range map[string]string{"new/a": "a", "old/added": "late"} {
		if b, _, ok := e.get(key); !ok || string(b) != want {
			t.Fatalf("%s in the bucket: %q %v", key, b, ok)
		}
	}
	if _, _, ok := e.get("old/a"); ok {
		t.Fatal("old/a still in the bucket after the rename was exported")
	}
}

func TestABurstOfPutsDuringTheFirstListingAllArrive(t *testing.T) {
	e := newEnv(t, withPoll(-1), withRevalidateTTL(-1))
	forwardEvents(e)
	e.put("burst/seed", []byte("s"), nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 100; i++ {
			e.put(fmt.Sprintf("burst/k%03d", i), []byte("x"), nil)
		}
	}()
	// List while the puts go on: events for keys the listing already
	// passed must not be lost, and each event must name its own key.
	if _, err := os.ReadDir(e.path("burst")); err != nil {
		t.Fatal(err)
	}
	<-done
	eventually(t, "all 100 objects put in a burst", func() bool {
		ents, err := os.ReadDir(e.path("burst"))
		return err == nil && len(ents) == 101
	})
}

// TestOpenWithOCreatOfAFileOnlyTheBucketKnowsOpensIt: open(O_CREAT) of a
// name that exists only in the bucket, in a directory never listed and in
// one listed before a restart, opens the bucket's file; it never makes a
// new, empty file that hides it.
func TestOpenWithOCreatOfAFileOnlyTheBucketKnowsOpensIt(t *testing.T) {
	e := newEnv(t, withPoll(-1))
	appendTo := func(path, s string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Never listed: the mount has not looked into d.
	e.put("d/x", []byte("bucket x;"), nil)
	appendTo(e.path("d/x"), "mount x")
	if got := readFile(t, e.path("d/x")); string(got) != "bucket x;mount x" {
		t.Fatalf("d/x reads %q after an O_CREAT|O_APPEND open, want the bucket's bytes and the append", got)
	}

	// Listed before a restart, and the bucket gained a name meanwhile.
	if names := listNames(t, e.path("d")); len(names) != 1 {
		t.Fatalf("d lists %v", names)
	}
	e.stop()
	e.put("d/y", []byte("bucket y;"), nil)
	e.start()
	appendTo(e.path("d/y"), "mount y")
	if got := readFile(t, e.path("d/y")); string(got) != "bucket y;mount y" {
		t.Fatalf("d/y reads %q after a restart and an O_CREAT|O_APPEND open, want the bucket's bytes and the append", got)
	}
}

// TestAFirstListingDoesNotBringBackNamesMovedAway: in a directory used
// only by name (lookups imported single files of it), a file is renamed
// away and another removed before the exporter carried either out; the
// bucket still holds their objects when the directory is next listed. The
// names must not come back. (Today the first change of names in such a
// directory lists it before it is made, so the later listing is a poll,
// which skips keys the file side records for inodes whose names moved on.)
// After the export the bucket agrees.
func TestAFirstListingDoesNotBringBackNamesMovedAway(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
	for _, k := range []string{"d/moved", "d/removed", "d/kept", "d/sub/moved", "d/gone/removed"} {
		e.put(k, []byte(k), nil)
	}
	// Lookups only: d, d/sub and d/gone are never listed.
	for _, k := range []string{"d/moved", "d/removed", "d/sub/moved", "d/gone/removed"} {
		if !readsAs(e.path(k), []byte(k)) {
			t.Fatalf("%s unreadable", k)
		}
	}
	if err := os.Rename(e.path("d/moved"), e.path("moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.path("d/removed")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.path("d/sub"), e.path("sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.path("d/gone/removed")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.path("d/gone")); err != nil {
		t.Fatal(err)
	}
	if got := listNames(t, e.path("d")); !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("the first listing of d shows %v, want [kept]", got)
	}
	e.flush()
	if got := listNames(t, e.path("d")); !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("after the export d shows %v, want [kept]", got)
	}
	for key, want := range map[string]bool{"d/kept": true, "moved": true, "sub/moved": true,
		"d/moved": false, "d/removed": false, "d/sub/moved": false, "d/gone/removed": false} {
		if _, _, ok := e.get(key); ok != want {
			t.Errorf("%s in the bucket: %v, want %v", key, ok, want)
		}
	}
}

// TestAnExportAfterADeleteInTheBucketLetsTheDeleteWin: the file side
// writes a file it imported; before the export, the object is deleted in
// the bucket (no events, no polls: the export finds out). The export must
// not bring the object back: the bucket wins, the name goes, and the file
// side's version is kept in lost+found. (Found by the differential sync
// test: the embedded store let a write conditional on the ETag the file
// side last saw replace the delete marker.)
func TestAnExportAfterADeleteInTheBucketLetsTheDeleteWin(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
	e.put("x.txt", []byte("base"), nil)
	if !readsAs(e.path("x.txt"), []byte("base")) {
		t.Fatal("unreadable")
	}
	writeFile(t, e.path("x.txt"), []byte("file side"))
	if _, err := e.s3.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &e.bucket, Key: aws.String("x.txt")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e.eng.Exporter.Flush(ctx) // finds the conflict, which the importer then resolves
	if b, _, ok := e.get("x.txt"); ok {
		t.Fatalf("the export undid the bucket's delete: x.txt holds %q", b)
	}
	eventually(t, "the delete to win on the file side", func() bool {
		_, err := os.Lstat(e.path("x.txt"))
		return errors.Is(err, os.ErrNotExist)
	})
	eventually(t, "lost+found to hold the file-side version", func() bool { return len(e.lostFound()) == 1 })
	if got := readFile(t, e.path(e.eng.Meta.LostFoundName()+"/"+e.lostFound()[0])); string(got) != "file side" {
		t.Fatalf("lost+found holds %q", got)
	}
}

// TestAWriteThroughAHandleToAFileTheBucketDeletedIsKept: a file is open
// on the file side when the bucket deletes it; the import removes the
// name, and the process then writes through the handle it holds. Both
// sides changed the file: the bucket's delete keeps the name away, and
// the file side's version must be kept in lost+found, as any conflict's
// loser is, not vanish with the unlinked inode at the close. (Found by
// the differential sync test: an open, then the delete's import, then
// the O_TRUNC and the write.)
func TestAWriteThroughAHandleToAFileTheBucketDeletedIsKept(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
	forwardEvents(e)
	e.put("k", []byte("bucket"), nil)
	if !readsAs(e.path("k"), []byte("bucket")) {
		t.Fatal("unreadable")
	}
	f, err := os.OpenFile(e.path("k"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := e.s3.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &e.bucket, Key: aws.String("k")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the bucket's delete to remove the name", func() bool {
		_, err := os.Lstat(e.path("k"))
		return errors.Is(err, os.ErrNotExist)
	})
	if _, err := f.WriteAt([]byte("file side"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	lf := e.lostFound()
	if len(lf) != 1 {
		t.Fatalf("lost+found holds %v, want the file side's version", lf)
	}
	if got := readFile(t, e.path(e.eng.Meta.LostFoundName()+"/"+lf[0])); string(got) != "file side" {
		t.Fatalf("lost+found's copy reads %q", got)
	}
	if !strings.HasPrefix(lf[0], "k.") {
		t.Errorf("lost+found names the copy %q; it should start with the key", lf[0])
	}
	if n := e.eng.Importer.Stats().Conflicts; n != 1 {
		t.Errorf("%d conflicts counted, want 1", n)
	}
	e.flush()
	if _, _, ok := e.get("k"); ok {
		t.Fatal("the delete made in the bucket was undone")
	}
	if _, err := os.Lstat(e.path("k")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("k is back on the file side: %v", err)
	}
}

// TestABucketSideChangeOfAFilesTypeMakesANewFile: the bucket replaces a
// regular file with a symlink object under the same key (and back). The
// kernel knows the old inode's type, which can never change: the name
// must come to a new inode of the new type, and writes through the name
// (O_TRUNC included) then behave as on the new file, never EINVAL or EIO
// from an inode whose type changed under the kernel. (Found by the
// differential sync test: open(O_TRUNC) of a name the bucket had just
// made a symlink answered EINVAL.)
func TestABucketSideChangeOfAFilesTypeMakesANewFile(t *testing.T) {
	e := newEnv(t, withPoll(-1), withRevalidateTTL(-1))
	forwardEvents(e)
	e.put("k", []byte("data"), nil)
	if !readsAs(e.path("k"), []byte("data")) {
		t.Fatal("unreadable")
	}
	before := inoOf(e.path("k"))
	symlink := map[string]string{"mode": strconv.Itoa(syscall.S_IFLNK | 0o777)}
	e.put("k", []byte("target"), symlink)
	eventually(t, "k to become a symlink", func() bool {
		got, err := os.Readlink(e.path("k"))
		return err == nil && got == "target"
	})
	if after := inoOf(e.path("k")); after == before {
		t.Errorf("the symlink has the regular file's inode number %d", after)
	}
	// And back: a regular file again, written through the name.
	e.put("k", []byte("file again"), nil)
	eventually(t, "k to become a file again", func() bool { return readsAs(e.path("k"), []byte("file again")) })
	f, err := os.OpenFile(e.path("k"), os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		t.Fatalf("open(O_TRUNC) of the file the bucket made again: %v", err)
	}
	if _, err := f.WriteString("mine"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if !readsAs(e.path("k"), []byte("mine")) {
		t.Fatal("the write did not land")
	}
}
