package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The --access-point flag refuses bad input with one line, before
// anything starts.
func TestAccessPointFlagErrorsAreOneLine(t *testing.T) {
	mnt := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--access-point", "team-a=/teams/a,uid=1"}, "gid= is required"},
		{[]string{"serve", "--access-point", "team/a=/teams/a,uid=1,gid=1"}, "has a '/'"},
		{[]string{"serve", "--access-point", "a=/x,uid=1,gid=1", "--access-point", "a=/y,uid=2,gid=2"}, `"a" defined twice`},
		{[]string{"mount", "--access-point", "a=x,uid=1,gid=1", mnt}, "not absolute"},
		{[]string{"mount", "--access-point", "a=/x,uid=1,gid=1,mode=999", mnt}, "mode="},
		{[]string{"mount", "--access-point", "a=/x,uid=1,gid=1", "--access-point", "b=/y,uid=1,gid=1", mnt}, "one access point"},
	} {
		err := run(c.args, io.Discard, io.Discard)
		if err == nil {
			t.Errorf("%q succeeded", c.args)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
			t.Errorf("%q: %q, want one line with %q", c.args, msg, c.want)
		}
	}
}

// The README's two-team example, through a client nobody here wrote:
// SERVER:/ lists the two access points and nothing else, and a file
// written through SERVER:/team-a lands under team A's root.
func TestLibnfsReachesTheFileSystemOnlyThroughAccessPoints(t *testing.T) {
	p := newFS(t)
	port := startServe(t, p,
		"--access-point", "team-a=/teams/a,uid=2001,gid=2001,mode=0770",
		"--access-point", "team-b=/teams/b,uid=2002,gid=2002,mode=0770")
	url := func(path string) string {
		return fmt.Sprintf("nfs://127.0.0.1/%s?version=4&nfsport=%s", path, port)
	}
	out := string(libnfs(t, "nfs-ls", url("/")))
	if !strings.Contains(out, "team-a") || !strings.Contains(out, "team-b") || strings.Contains(out, "teams") {
		t.Fatalf("nfs-ls / lists:\n%s", out)
	}
	small := []byte("written through team-a\n")
	src := filepath.Join(t.TempDir(), "hello.txt")
	if err := os.WriteFile(src, small, 0o644); err != nil {
		t.Fatal(err)
	}
	libnfs(t, "nfs-cp", src, url("/team-a/hello.txt"))
	if got := libnfs(t, "nfs-cat", url("/team-a/hello.txt")); !bytes.Equal(got, small) {
		t.Fatalf("nfs-cat through team-a: %q", got)
	}
	if out := string(libnfs(t, "nfs-ls", url("/team-b"))); strings.Contains(out, "hello.txt") {
		t.Fatalf("team-b lists team-a's file:\n%s", out)
	}
	waitFor(t, "the file to reach the bucket under team A's root", func() bool {
		b, ok := p.object("teams/a/hello.txt")
		return ok && bytes.Equal(b, small)
	})
}

// `bucketfs mount --access-point` mounts the access point's root, made
// with its owner and mode, and makes files as its identity.
func TestMountOfAnAccessPoint(t *testing.T) {
	p := newFS(t)
	p.start("--access-point", "team-a=/teams/a,uid=2001,gid=3001,mode=0750")
	t.Cleanup(p.stop)
	var st syscall.Stat_t
	if err := syscall.Stat(p.mnt, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 2001 || st.Gid != 3001 || st.Mode != syscall.S_IFDIR|0o750 {
		t.Errorf("the mount's root is %d:%d %o, want 2001:3001 %o", st.Uid, st.Gid, st.Mode, syscall.S_IFDIR|0o750)
	}
	f := filepath.Join(p.mnt, "f")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(f, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 2001 || st.Gid != 3001 {
		t.Errorf("a file made through the mount is %d:%d, want 2001:3001", st.Uid, st.Gid)
	}
}
