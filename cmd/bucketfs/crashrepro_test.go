package main

import (
	"bytes"
	"context"
	be "encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sys/unix"
)

// The reproductions of issue 9 (crash consistency), each run on the real
// binary killed with SIGKILL. After any crash a file must read back one
// state it really had at or after its last fsync, or the bucket's version;
// never an error while a good copy exists, never zeros nobody wrote, never a
// mix; and the bucket must only ever receive such states. Checkpoints are
// off (an hour apart), so nothing but the engine's own ordering decides what
// survives.

var noCheckpoint = []string{"--export-delay", "1h", "--checkpoint-interval", "1h"}

// pattern returns n bytes of the 8-byte word that names version v, so that
// any 8 aligned bytes tell which version they came from.
func pattern(n, v int) []byte {
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		be.BigEndian.PutUint64(b[i:], 0xB0C4E7F5_00000000|uint64(v))
	}
	return b[:n]
}

// describe summarises b as runs of version words and zeros.
func describe(b []byte) string {
	var out bytes.Buffer
	fmt.Fprintf(&out, "%d bytes:", len(b))
	for i := 0; i < len(b); {
		j := i + 8
		for j < len(b) && j+8 <= len(b) && bytes.Equal(b[j:j+8], b[i:i+8]) {
			j += 8
		}
		j = min(j, len(b))
		w := b[i:min(i+8, len(b))]
		switch {
		case bytes.Count(w, []byte{0}) == len(w):
			fmt.Fprintf(&out, " [%d,%d) zeros", i, j)
		case len(w) == 8 && be.BigEndian.Uint64(w)>>32 == 0xB0C4E7F5:
			fmt.Fprintf(&out, " [%d,%d) v%d", i, j, be.BigEndian.Uint64(w)&0xffffffff)
		default:
			fmt.Fprintf(&out, " [%d,%d) other", i, j)
		}
		i = j
		if out.Len() > 400 {
			out.WriteString(" ...")
			break
		}
	}
	return out.String()
}

// oneOf fails unless got is exactly one of the states.
func oneOf(t *testing.T, what string, got []byte, states ...[]byte) {
	t.Helper()
	for _, s := range states {
		if bytes.Equal(got, s) {
			return
		}
	}
	var want []string
	for _, s := range states {
		want = append(want, describe(s))
	}
	t.Fatalf("%s is not a state the file had:\n  got  %s\n  want one of %q", what, describe(got), want)
}

// versions returns the bodies of every version of key in the bucket,
// newest first.
func (p *fsProc) versions(key string) [][]byte {
	p.t.Helper()
	c, bucket := p.s3()
	out, err := c.ListObjectVersions(context.Background(), &s3.ListObjectVersionsInput{Bucket: &bucket, Prefix: &key})
	if err != nil {
		p.t.Fatal(err)
	}
	var bodies [][]byte
	for _, v := range out.Versions {
		if *v.Key != key {
			continue
		}
		o, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: &key, VersionId: v.VersionId})
		if err != nil {
			p.t.Fatal(err)
		}
		b, err := io.ReadAll(o.Body)
		o.Body.Close()
		if err != nil {
			p.t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	return bodies
}

// Reproduction 1: an fsync'ed file cut by a truncate or an O_TRUNC rewrite,
// then a kill -9. It read EIO after the restart, and was exported as zeros.
func TestKill9AfterATruncateKeepsTheFsyncedVersionOrTheNewOne(t *testing.T) {
	v1, v2 := pattern(100000, 1), pattern(30000, 2)
	for _, tc := range []struct {
		name   string
		change func(path string) error
		states [][]byte // what the change may leave, besides v1
	}{
		{"truncate to 0", func(p string) error { return os.Truncate(p, 0) }, [][]byte{{}}},
		{"truncate down", func(p string) error { return os.Truncate(p, 5000) }, [][]byte{v1[:5000]}},
		{"O_TRUNC rewrite", func(p string) error { return os.WriteFile(p, v2, 0o644) }, [][]byte{{}, v2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFS(t)
			p.start(noCheckpoint...)
			f := filepath.Join(p.mnt, "f")
			writeSynced(t, f, v1)
			if err := tc.change(f); err != nil {
				t.Fatal(err)
			}
			p.kill9()
			p.start(noCheckpoint...)
			got, err := os.ReadFile(f)
			if err != nil {
				t.Fatalf("read after kill -9: %v", err)
			}
			oneOf(t, "the file after kill -9", got, append(tc.states, v1)...)
			p.run("flush")
			obj, ok := p.object("f")
			if !ok {
				t.Fatal("no object after flush")
			}
			oneOf(t, "the object after flush", obj, got)
		})
	}
}

// Reproduction 2: an exported file changed in place (an overwrite or a
// punched hole) without fsync, then a kill -9. The mount showed the change
// while the metadata forgot it: nothing was exported and the two sides
// disagreed for good.
func TestKill9AfterAnUnsyncedChangeOfAnExportedFileLeavesBothSidesAgreeing(t *testing.T) {
	v1 := pattern(64<<10, 1)
	for _, tc := range []struct {
		name   string
		change func(f *os.File) error
		after  []byte
	}{
		{"overwrite", func(f *os.File) error { _, err := f.WriteAt(pattern(4096, 2), 8192); return err },
			append(append(bytes.Clone(v1[:8192]), pattern(4096, 2)...), v1[12288:]...)},
		{"punch", func(f *os.File) error {
			return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 8192, 4096)
		}, append(append(bytes.Clone(v1[:8192]), make([]byte, 4096)...), v1[12288:]...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFS(t)
			p.start(noCheckpoint...)
			path := filepath.Join(p.mnt, "f")
			writeSynced(t, path, v1)
			p.run("flush")
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.change(f); err != nil {
				t.Fatal(err)
			}
			f.Close()
			p.kill9()
			p.start(noCheckpoint...)
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read after kill -9: %v", err)
			}
			oneOf(t, "the file after kill -9", got, v1, tc.after)
			p.run("flush")
			obj, _ := p.object("f")
			oneOf(t, "the object after flush (it must match the mount)", obj, got)
		})
	}
}

// Reproduction 3: a file rewritten and exported just before the kill: the
// bucket has the complete new version, and the mount read EIO.
func TestKill9RightAfterAnExportShowsTheExportedVersion(t *testing.T) {
	v1, v2 := pattern(50000, 1), pattern(70000, 2)
	p := newFS(t)
	p.start(noCheckpoint...)
	path := filepath.Join(p.mnt, "f")
	writeSynced(t, path, v1)
	p.run("flush")
	if err := os.WriteFile(path, v2, 0o644); err != nil {
		t.Fatal(err)
	}
	p.run("flush")
	if obj, _ := p.object("f"); !bytes.Equal(obj, v2) {
		t.Fatalf("flush left %s in the bucket", describe(obj))
	}
	p.kill9()
	p.start(noCheckpoint...)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read after kill -9: %v", err)
	}
	oneOf(t, "the file after kill -9", got, v2)
}

// Reproduction 4: a file whose unsynced data was lost in a crash was
// exported as zeros, over a good object. Every version the bucket ever
// receives must be a state the file had.
func TestKill9NeverExportsBytesTheFileNeverHeld(t *testing.T) {
	v1, v2, v3 := pattern(40000, 1), pattern(90000, 2), pattern(20000, 3)
	p := newFS(t)
	p.start(noCheckpoint...)
	old, fresh := filepath.Join(p.mnt, "old"), filepath.Join(p.mnt, "fresh")
	writeSynced(t, old, v1)
	p.run("flush")
	if err := os.WriteFile(old, v2, 0o644); err != nil { // never fsynced
		t.Fatal(err)
	}
	if err := os.WriteFile(fresh, v3, 0o644); err != nil { // a new file, never fsynced
		t.Fatal(err)
	}
	p.kill9()
	p.start(noCheckpoint...)
	got, err := os.ReadFile(old)
	if err != nil {
		t.Fatalf("read old after kill -9: %v", err)
	}
	oneOf(t, "old after kill -9", got, v1, []byte{}, v2)
	gotFresh, err := os.ReadFile(fresh)
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("read fresh after kill -9: %v", err)
	}
	if err == nil {
		oneOf(t, "fresh after kill -9", gotFresh, []byte{}, v3)
	}
	p.run("flush")
	for _, b := range p.versions("old") {
		oneOf(t, "a version of old in the bucket", b, v1, []byte{}, v2)
	}
	for _, b := range p.versions("fresh") {
		oneOf(t, "a version of fresh in the bucket", b, []byte{}, v3)
	}
	if obj, _ := p.object("old"); !bytes.Equal(obj, got) {
		t.Fatalf("old: the bucket has %s, the mount %s", describe(obj), describe(got))
	}
}
