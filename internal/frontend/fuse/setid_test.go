package fuse_test

// Set-id bits across writes, truncates and chown through a real FUSE mount
// (issue 21), against the rule of the Linux these tests run on (6.2 on):
// a caller with CAP_FSETID (root) keeps them; anyone else clears the
// set-user-id bit, and the set-group-id bit where group execute is set or
// the caller is not in the file's group. chown clears set-user-id even
// for root.

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	bfuse "bucketfs/internal/frontend/fuse"
	"bucketfs/internal/s3test"
)

// newSetIDEnv mounts with attributes cached for an hour, so that a stat
// after a change shows the new mode only if the kernel dropped its cached
// one (it does after a write or a setattr reply), never because the cache
// timed out.
func newSetIDEnv(t *testing.T) *env {
	t.Helper()
	srv, name := s3test.NewBucket(t)
	e := newEnvMounted(t, srv, name, bfuse.Options{Name: "bucketfs-test", AttrTimeout: time.Hour, EntryTimeout: time.Hour})
	openMount(t, e)
	return e
}

// setIDFile (re)makes e's file f with the given owner and mode, and stats
// it once so the kernel caches its attributes.
func setIDFile(t *testing.T, f string, uid, gid int, mode uint32) {
	t.Helper()
	writeFile(t, f, []byte("data"))
	if err := os.Chown(f, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(f, mode); err != nil {
		t.Fatal(err)
	}
	if got := stat(t, f).Mode & 0o7777; got != mode {
		t.Fatalf("mode %o after chmod %o", got, mode)
	}
}

// TestRootKeepsSetIDBitsWhenItWritesOrTruncates: root has CAP_FSETID, so
// its writes, truncates, ftruncates and O_TRUNC opens leave a file's
// set-user-id and set-group-id bits alone, as on a local disk.
func TestRootKeepsSetIDBitsWhenItWritesOrTruncates(t *testing.T) {
	e := newSetIDEnv(t)
	f := e.path("f")
	ops := []struct {
		name string
		do   func() error
	}{
		{"append", func() error {
			fd, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer fd.Close()
			_, err = fd.Write([]byte("more"))
			return err
		}},
		{"pwrite", func() error {
			fd, err := os.OpenFile(f, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer fd.Close()
			_, err = fd.WriteAt([]byte("DA"), 0)
			return err
		}},
		{"truncate", func() error { return os.Truncate(f, 2) }},
		{"ftruncate", func() error {
			fd, err := os.OpenFile(f, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer fd.Close()
			return fd.Truncate(1)
		}},
		{"open O_TRUNC", func() error {
			fd, err := os.OpenFile(f, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				return err
			}
			return fd.Close()
		}},
	}
	for _, mode := range []uint32{0o4755, 0o2755, 0o6755, 0o2745} {
		for _, owner := range []int{0, 1000} {
			for _, op := range ops {
				setIDFile(t, f, owner, owner, mode)
				if err := op.do(); err != nil {
					t.Fatalf("%s by root on a %o file of uid %d: %v", op.name, mode, owner, err)
				}
				if got := stat(t, f).Mode & 0o7777; got != mode {
					t.Errorf("%s by root on a %o file of uid %d: mode %o, want %o", op.name, mode, owner, got, mode)
				}
			}
		}
	}
}

// TestAWriterWithoutCAP_FSETIDClearsSetIDBitsAndStatShowsItAtOnce: the
// owner of a set-id file, not root, writes or truncates it: the bits go
// (set-group-id where group execute is set, or where the writer is not in
// the file's group), and a stat right after, by the writer or by root,
// shows the new mode although the kernel caches attributes for an hour.
func TestAWriterWithoutCAP_FSETIDClearsSetIDBitsAndStatShowsItAtOnce(t *testing.T) {
	e := newSetIDEnv(t)
	f := e.path("f")
	owner := syscall.Credential{Uid: 1000, Gid: 1000}
	for _, tc := range []struct {
		script   string
		gid      int
		from, to uint32
	}{
		{`printf x >> "$1"`, 1000, 0o4755, 0o755},
		{`printf x >> "$1"`, 1000, 0o2755, 0o755},
		{`printf x >> "$1"`, 1000, 0o6755, 0o755},
		{`printf x >> "$1"`, 1000, 0o2745, 0o2745}, // in the group, no group execute: stays
		{`printf x >> "$1"`, 0, 0o2745, 0o745},     // not in the group: goes
		{`printf x 1<> "$1"`, 1000, 0o6755, 0o755}, // a write in place, not at the end
		{`truncate -s 2 "$1"`, 1000, 0o6755, 0o755},
		{`truncate -s 2 "$1"`, 1000, 0o2745, 0o2745},
		{`: > "$1"`, 1000, 0o6755, 0o755},
	} {
		setIDFile(t, f, 1000, tc.gid, tc.from)
		out, err := runAs(owner, "/bin/sh", "-c", tc.script+` && stat -c %a "$1"`, "sh", f)
		if err != nil {
			t.Fatalf("%s as the owner: %v %q", tc.script, err, out)
		}
		if got, want := strings.TrimSpace(out), fmt.Sprintf("%o", tc.to); got != want {
			t.Errorf("%s on a %o file of group %d: the writer's stat right after shows %s, want %s",
				tc.script, tc.from, tc.gid, got, want)
		}
		if got := stat(t, f).Mode & 0o7777; got != tc.to {
			t.Errorf("%s on a %o file of group %d: root's stat shows %o, want %o", tc.script, tc.from, tc.gid, got, tc.to)
		}
	}
}

// TestChownClearsSetIDBitsEvenForRoot: a chown of a regular file clears
// set-user-id whoever makes it, root included, and even to the same
// owner; set-group-id goes where group execute is set, and stays on a
// file without it when root changes the owner.
func TestChownClearsSetIDBitsEvenForRoot(t *testing.T) {
	e := newSetIDEnv(t)
	f := e.path("f")
	for _, tc := range []struct {
		uid, gid int
		from, to uint32
	}{
		{1000, 1000, 0o6755, 0o755},
		{0, 0, 0o6755, 0o755}, // the same owner again
		{1000, 1000, 0o2745, 0o2745},
	} {
		setIDFile(t, f, 0, 0, tc.from)
		if err := os.Chown(f, tc.uid, tc.gid); err != nil {
			t.Fatal(err)
		}
		if got := stat(t, f).Mode & 0o7777; got != tc.to {
			t.Errorf("chown %d:%d of a %o file by root: mode %o, want %o", tc.uid, tc.gid, tc.from, got, tc.to)
		}
	}
}
