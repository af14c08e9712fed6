package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// startServe runs `bucketfs serve` on the embedded store and returns the
// NFS port; the process is stopped with the test.
func startServe(t *testing.T, p *fsProc, flags ...string) string {
	t.Helper()
	nfsAddr := freeAddr(t)
	p.cmd = exec.Command(binary, append([]string{"serve", "--state-dir", p.stateDir, "--s3-listen", p.s3Addr,
		"--nfs-listen", nfsAddr, "--root-squash=false", "--export-delay", "100ms"}, flags...)...)
	p.log = &bytes.Buffer{}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd := p.cmd
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	waitFor(t, "the NFS server", func() bool { return strings.Contains(p.log.String(), "over NFS on") })
	_, port, _ := strings.Cut(nfsAddr, ":")
	return port
}

// libnfs runs one of Debian's libnfs-utils commands, a client nobody here
// wrote. It speaks NFSv4.0 (SETCLIENTID, OPEN_CONFIRM).
func libnfs(t *testing.T, tool string, args ...string) []byte {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err != nil {
		t.Fatalf("%s not found: install libnfs-utils (.ci/run does)", tool)
	}
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", tool, args, err, out)
	}
	return out
}

func TestLibnfsListsReadsAndWritesFilesOnServe(t *testing.T) {
	p := newFS(t)
	port := startServe(t, p)
	url := func(path string) string {
		return fmt.Sprintf("nfs://127.0.0.1/%s?version=4&nfsport=%s", path, port)
	}
	// An object put through S3 is listed and read over NFS.
	c, bucket := p.s3()
	big := randomBytes(5<<20 + 17)
	key := "data/big.bin"
	if _, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(big)}); err != nil {
		t.Fatal(err)
	}
	if out := libnfs(t, "nfs-ls", url("/data")); !strings.Contains(string(out), "big.bin") {
		t.Fatalf("nfs-ls /data:\n%s", out)
	}
	if got := libnfs(t, "nfs-cat", url("/data/big.bin")); !bytes.Equal(got, big) {
		t.Fatalf("nfs-cat read %d bytes, want the %d put through S3", len(got), len(big))
	}
	// A file written over NFS reaches the bucket. (Debian's nfs-cp fails
	// uploads over about 3.9 KB against any server: a limit of that build, see README.)
	small := []byte("written by libnfs over NFSv4.0\n")
	src := filepath.Join(t.TempDir(), "small.txt")
	if err := os.WriteFile(src, small, 0o644); err != nil {
		t.Fatal(err)
	}
	libnfs(t, "nfs-cp", src, url("/data/small.txt"))
	if got := libnfs(t, "nfs-cat", url("/data/small.txt")); !bytes.Equal(got, small) {
		t.Fatalf("nfs-cat of the uploaded file: %q", got)
	}
	waitFor(t, "the upload to reach the bucket", func() bool {
		b, ok := p.object("data/small.txt")
		return ok && bytes.Equal(b, small)
	})
	if out := libnfs(t, "nfs-ls", url("/")); !strings.Contains(string(out), "data") {
		t.Fatalf("nfs-ls /:\n%s", out)
	}
}

// One-shot NFSv4.0 clients (nfs-cp, nfs-cat) hold no state once they have
// exited, so a restart of `serve` right after them has no grace period:
// the next nfs-cat reads at once (libnfs does not retry NFS4ERR_GRACE),
// and the log says why (issue 22).
func TestLibnfsClientsThatExitedHoldUpNothingAfterAServeRestart(t *testing.T) {
	p := newFS(t)
	port := startServe(t, p)
	url := func(port, path string) string {
		return fmt.Sprintf("nfs://127.0.0.1/%s?version=4&nfsport=%s", path, port)
	}
	small := []byte("copied before the restart\n")
	src := filepath.Join(t.TempDir(), "small.txt")
	if err := os.WriteFile(src, small, 0o644); err != nil {
		t.Fatal(err)
	}
	libnfs(t, "nfs-cp", src, url(port, "/small.txt"))
	if got := libnfs(t, "nfs-cat", url(port, "/small.txt")); !bytes.Equal(got, small) {
		t.Fatalf("nfs-cat before the restart: %q", got)
	}

	p.stop()
	port = startServe(t, p)
	if got := libnfs(t, "nfs-cat", url(port, "/small.txt")); !bytes.Equal(got, small) {
		t.Fatalf("nfs-cat after the restart: %q", got)
	}
	if !strings.Contains(p.log.String(), "no grace period") {
		t.Errorf("the restarted server did not say there is no grace period:\n%s", p.log)
	}
}
