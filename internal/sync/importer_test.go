package sync

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"bucketfs/internal/bucket"
	"bucketfs/internal/kv/kvreplay"
	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/meta"
)

// fakeStore is an in-process gofakes3 server. These tests use it rather
// than the embedded versitygw store because versitygw keeps objects as
// files and refuses exactly the hostile keys under test ("a//b", "./x",
// segments over 255 bytes, an object beside a prefix of the same name).
func fakeStore(t testing.TB) *bucket.Client {
	t.Helper()
	be := s3mem.New()
	if err := be.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(be).Server())
	t.Cleanup(srv.Close)
	c, err := bucket.New(context.Background(), bucket.Config{Bucket: "b", Endpoint: srv.URL,
		AccessKey: "a", SecretKey: "s", Region: "us-east-1", OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newMeta(t testing.TB) *meta.Store {
	t.Helper()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	db = kvreplay.FromEnv(t, db)
	t.Cleanup(func() { db.Close() })
	m, err := meta.Open(context.Background(), db, meta.Options{ExportDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newFile creates the regular file name in the root of m, holding body
// (nothing for nil).
func newFile(t testing.TB, m *meta.Store, name string, body []byte) meta.Inode {
	t.Helper()
	ctx := context.Background()
	in, err := m.Create(ctx, meta.RootIno, name, meta.Inode{Mode: syscall.S_IFREG | 0o644}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		if in, err = m.WriteData(ctx, in.Ino, body, 0, false, 0, meta.Limits{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return in
}

func put(t testing.TB, c *bucket.Client, key string, md map[string]string) {
	t.Helper()
	body := []byte("data of " + key)
	if _, err := c.Put(context.Background(), key, bytes.NewReader(body), int64(len(body)), bucket.PutOptions{Metadata: md}); err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
}

func list(t *testing.T, m *meta.Store, im *Importer, path string) []string {
	t.Helper()
	ctx := context.Background()
	in, err := m.Get(ctx, meta.RootIno)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range strings.Split(path, "/") {
		if part == "" {
			continue
		}
		if err := im.EnsureListed(ctx, &in); err != nil {
			t.Fatal(err)
		}
		if in, err = m.Lookup(ctx, in.Ino, part); err != nil {
			t.Fatalf("lookup %q: %v", part, err)
		}
	}
	if err := im.EnsureListed(ctx, &in); err != nil {
		t.Fatal(err)
	}
	ents, err := m.ReadDir(ctx, in.Ino, "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name, meta.LostFoundPrefix) {
			names = append(names, e.Name)
		}
	}
	sort.Strings(names)
	return names
}

func TestHostileKeysAreSkippedAndCountedWhileTheRestLists(t *testing.T) {
	c := fakeStore(t)
	m := newMeta(t)
	im := NewImporter(m, c, ImporterConfig{})
	for _, k := range []string{"ok.txt", "bad//double", "./dot", "x/../up", "x/fine",
		strings.Repeat("n", 256), "clash", "clash/inside", "deep/a/b"} {
		put(t, c, k, nil)
	}
	if got := strings.Join(list(t, m, im, ""), ","); got != "bad,clash,deep,ok.txt,x" {
		t.Fatalf("root lists %s", got)
	}
	if got := strings.Join(list(t, m, im, "bad"), ","); got != "" {
		t.Fatalf("bad/ lists %q; the empty segment must be skipped", got)
	}
	if got := strings.Join(list(t, m, im, "x"), ","); got != "fine" {
		t.Fatalf("x/ lists %q", got)
	}
	if got := strings.Join(list(t, m, im, "clash"), ","); got != "inside" {
		t.Fatalf("clash/ lists %q", got)
	}
	st := im.Stats()
	// "./dot", 256-byte name, "clash" object at the root; "bad//" and
	// "x/../" in their directories.
	if st.Failures != 5 {
		t.Fatalf("counted %d import failures (samples %v), want 5", st.Failures, st.Samples)
	}
	// Listing again does not count (or log) the same keys twice as new
	// samples, and the rest still lists.
	if len(st.Samples) != 5 {
		t.Fatalf("samples %v", st.Samples)
	}
}

func TestListingPagesPastAThousandKeys(t *testing.T) {
	c := fakeStore(t)
	m := newMeta(t)
	im := NewImporter(m, c, ImporterConfig{})
	for i := 0; i < 1234; i++ {
		put(t, c, fmt.Sprintf("d/k%05d", i), nil)
	}
	if n := len(list(t, m, im, "d")); n != 1234 {
		t.Fatalf("listed %d entries, want 1234", n)
	}
}

// Attributes an object carries (s3fs's names) are read back; what it
// lacks is flagged for the file system's defaults (meta.Defaults).
func TestAttributesComeFromS3fsMetadataOrDefaults(t *testing.T) {
	lm := time.Unix(1600000000, 0)
	const all = meta.Defaulted
	tests := []struct {
		name          string
		md            map[string]string
		dir           bool
		wantMode      uint32
		wantUid       uint32
		wantMtime     int64
		wantDefaulted meta.Flags
	}{
		{"no metadata file", nil, false, syscall.S_IFREG, 0, lm.UnixNano(), all},
		{"no metadata dir", nil, true, syscall.S_IFDIR, 0, lm.UnixNano(), all},
		{"s3fs file", map[string]string{"mode": "33261", "uid": "1000", "gid": "1000", "mtime": "1700000000"}, false, syscall.S_IFREG | 0o755, 1000, 1700000000e9, 0},
		{"bare permission bits", map[string]string{"mode": "416"}, false, syscall.S_IFREG | 0o640, 0, lm.UnixNano(), meta.UidDefaulted | meta.GidDefaulted},
		{"owner without a mode", map[string]string{"uid": "1000"}, false, syscall.S_IFREG, 1000, lm.UnixNano(), meta.ModeDefaulted | meta.GidDefaulted},
		{"nanosecond mtime wins", map[string]string{"mtime": "1", "bucketfs-mtime": "1700000000123456789"}, false, syscall.S_IFREG, 0, 1700000000123456789, all},
		{"garbage", map[string]string{"mode": "rwx", "uid": "-1", "gid": "x", "mtime": "soon"}, false, syscall.S_IFREG, 0, lm.UnixNano(), all},
		{"directory mode on a plain key", map[string]string{"mode": fmt.Sprint(syscall.S_IFDIR | 0o700)}, false, syscall.S_IFREG | 0o700, 0, lm.UnixNano(), meta.UidDefaulted | meta.GidDefaulted},
		{"symlink", map[string]string{"mode": fmt.Sprint(syscall.S_IFLNK | 0o777)}, false, syscall.S_IFLNK | 0o777, 0, lm.UnixNano(), meta.UidDefaulted | meta.GidDefaulted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mode, uid, _, _, mtime, defaulted := attrsFromMetadata(tc.md, lm, tc.dir)
			if mode != tc.wantMode || uid != tc.wantUid || mtime != tc.wantMtime || defaulted != tc.wantDefaulted {
				t.Fatalf("got mode %o uid %d mtime %d defaulted %b, want %o %d %d %b", mode, uid, mtime, defaulted,
					tc.wantMode, tc.wantUid, tc.wantMtime, tc.wantDefaulted)
			}
		})
	}
	// What the exporter writes reads back the same, with nothing left to
	// the defaults.
	in := meta.Inode{Mode: syscall.S_IFCHR | 0o600, Uid: 7, Gid: 8, Rdev: 0x0103, Mtime: 1700000000987654321}
	mode, uid, gid, rdev, mtime, defaulted := attrsFromMetadata(objectMetadata(&in, "fs", "k"), lm, false)
	if mode != in.Mode || uid != 7 || gid != 8 || rdev != in.Rdev || mtime != in.Mtime || defaulted != 0 {
		t.Fatalf("round trip: mode %o uid %d gid %d rdev %x mtime %d defaulted %b", mode, uid, gid, rdev, mtime, defaulted)
	}
}

func TestAnObjectBesideAPrefixOnALaterPageIsStillSkipped(t *testing.T) {
	c := fakeStore(t)
	m := newMeta(t)
	im := NewImporter(m, c, ImporterConfig{})
	// "x-0000" to "x-1099" sort between "x" and "x/", so the prefix comes a
	// page after the object.
	put(t, c, "x", nil)
	for i := 0; i < 1100; i++ {
		put(t, c, fmt.Sprintf("x-%04d", i), nil)
	}
	put(t, c, "x/in", nil)
	names := list(t, m, im, "")
	if len(names) != 1101 || names[0] != "x" {
		t.Fatalf("root lists %d names starting %v", len(names), names[:min(3, len(names))])
	}
	in, err := m.Lookup(context.Background(), meta.RootIno, "x")
	if err != nil || !in.IsDir() {
		t.Fatalf("x should be the directory: %v", err)
	}
	if f := im.Stats().Failures; f != 1 {
		t.Fatalf("failures %d, want 1 (the object x)", f)
	}
}

// Issue 10, item 10: gofakes3 returns a directory marker "d/" as an object
// of the listing of its own prefix, and lists a marker of a directory
// without other keys as an object of the parent. Either way d is a
// directory and both listings read.
func TestADirectoryMarkerListedAsAnObjectIsADirectory(t *testing.T) {
	c := fakeStore(t)
	put(t, c, "d/", nil)
	put(t, c, "d/x", nil)
	put(t, c, "d/e/", nil)
	put(t, c, "only/", nil)
	m := newMeta(t)
	im := NewImporter(m, c, ImporterConfig{})
	if got := list(t, m, im, ""); !slices.Equal(got, []string{"d", "only"}) {
		t.Fatalf("root lists %v", got)
	}
	if got := list(t, m, im, "d"); !slices.Equal(got, []string{"e", "x"}) {
		t.Fatalf("d lists %v", got)
	}
	if got := list(t, m, im, "only"); len(got) != 0 {
		t.Fatalf("only lists %v", got)
	}
	if got := list(t, m, im, "d/e"); len(got) != 0 {
		t.Fatalf("d/e lists %v", got)
	}
}

// The origin tag names the key it was written to: the same tag read at
// another key (a copy made in the bucket) is no tag of ours, and a tag
// written before keys were recorded still counts.
func TestAnOriginTagHoldsOnlyAtItsOwnKey(t *testing.T) {
	in := meta.Inode{Ino: 42, Gen: 7}
	md := objectMetadata(&in, "fs", "a/b")
	if who, gen, ok := originOf(md, "a/b"); !ok || who != "fs/42" || gen != 7 {
		t.Fatalf("at its key: %q %d %v", who, gen, ok)
	}
	if _, _, ok := originOf(md, "a/c"); ok {
		t.Fatal("the tag counted at another key")
	}
	old := map[string]string{mdOrigin: "fs/42/7"}
	if who, gen, ok := originOf(old, "anywhere"); !ok || who != "fs/42" || gen != 7 {
		t.Fatalf("a tag without a key: %q %d %v", who, gen, ok)
	}
}
