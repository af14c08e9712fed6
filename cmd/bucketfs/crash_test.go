package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/fusetest"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"bucketfs/internal/s3test"
)

// These tests run the real binary: `bucketfs mount` on the embedded store,
// killed with SIGKILL at awkward moments and started again on the same state
// directory.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bucketfs-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "bucketfs")
	// -buildvcs=auto: stamp the revision when this is a git checkout,
	// as a user's build is (the environment may turn it off).
	out, err := exec.Command("go", "build", "-buildvcs=auto", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build bucketfs: %v\n%s", err, out)
		os.Exit(1)
	}
	code := s3test.Main(m) // closes the in-process store, if a test started one
	os.RemoveAll(dir)
	os.Exit(code)
}

// fsProc is one `bucketfs mount` process.
type fsProc struct {
	t        *testing.T
	stateDir string
	mnt      string
	s3Addr   string
	cmd      *exec.Cmd
	log      *bytes.Buffer
	env      []string // added to the environment of the process
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// newFS prepares a state directory and mountpoint; start mounts.
func newFS(t *testing.T) *fsProc {
	return &fsProc{t: t, stateDir: t.TempDir(), mnt: t.TempDir(), s3Addr: freeAddr(t)}
}

func (p *fsProc) start(flags ...string) {
	p.t.Helper()
	args := append([]string{"mount", "--state-dir", p.stateDir, "--s3-listen", p.s3Addr}, flags...)
	args = append(args, p.mnt)
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = append(os.Environ(), p.env...)
	p.log = &bytes.Buffer{}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	cmd := p.cmd
	p.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			fusetest.Abort(p.mnt)
			cmd.Wait()
		}
		exec.Command("fusermount3", "-u", "-z", p.mnt).Run()
	})
	waitFor(p.t, "the mount", func() bool { return fusetest.Mounted(p.mnt) })
	// The admin socket comes up just after the mount (the engine starts
	// once the mount is made), before the start line: status and flush
	// reach the process only then. CI saw a flush right after a start find
	// nothing running.
	waitFor(p.t, "the start line", func() bool { return strings.Contains(p.log.String(), "mounted at") })
}

// kill9 kills the process with SIGKILL and clears the dead mount.
func (p *fsProc) kill9() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGKILL)
	// The dying process may wait on its own dead mount (fusetest.Abort).
	if err := fusetest.Abort(p.mnt); err != nil {
		p.t.Logf("abort the FUSE connection of %s: %v", p.mnt, err)
	}
	p.cmd.Wait()
	if out, err := exec.Command("fusermount3", "-u", "-z", p.mnt).CombinedOutput(); err != nil {
		p.t.Fatalf("clear dead mount: %v %s", err, out)
	}
}

// stop asks the process to exit (SIGTERM) and waits.
func (p *fsProc) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil {
		p.t.Fatalf("bucketfs exited with %v:\n%s", err, p.log)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// s3 returns a client for the embedded store from the state directory's
// s3.env, and the bucket name.
func (p *fsProc) s3() (*s3.Client, string) {
	p.t.Helper()
	f, err := os.Open(filepath.Join(p.stateDir, "s3.env"))
	if err != nil {
		p.t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	c := s3.New(s3.Options{Region: env["AWS_REGION"], BaseEndpoint: aws.String(env["AWS_ENDPOINT_URL"]), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], "")})
	return c, env["BUCKETFS_BUCKET"]
}

// object reads key from the bucket; ok is false when it does not exist.
func (p *fsProc) object(key string) (body []byte, ok bool) {
	p.t.Helper()
	c, bucket := p.s3()
	out, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		var code interface{ ErrorCode() string }
		if errors.As(err, &code) && (code.ErrorCode() == "NoSuchKey" || code.ErrorCode() == "NotFound") {
			return nil, false
		}
		p.t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		p.t.Fatal(err)
	}
	return b, true
}

// keys lists the bucket's keys under prefix.
func (p *fsProc) keys(prefix string) []string {
	p.t.Helper()
	c, bucket := p.s3()
	var keys []string
	pg := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &prefix})
	for pg.HasMorePages() {
		out, err := pg.NextPage(context.Background())
		if err != nil {
			p.t.Fatal(err)
		}
		for _, o := range out.Contents {
			keys = append(keys, *o.Key)
		}
	}
	return keys
}

func (p *fsProc) run(args ...string) string {
	p.t.Helper()
	out, err := exec.Command(binary, append(args[:1:1], append([]string{"--state-dir", p.stateDir}, args[1:]...)...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("bucketfs %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func writeSynced(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func TestKill9KeepsFsyncedDataAndResumesPendingExports(t *testing.T) {
	p := newFS(t)
	p.start("--export-delay", "1h")
	small, big := []byte("fsynced before the crash\n"), randomBytes(20<<20)
	if err := os.Mkdir(filepath.Join(p.mnt, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeSynced(t, filepath.Join(p.mnt, "d", "small"), small)
	writeSynced(t, filepath.Join(p.mnt, "big"), big)
	st, _ := os.Stat(filepath.Join(p.mnt, "big"))
	ino := st.Sys().(*syscall.Stat_t).Ino
	if _, ok := p.object("big"); ok {
		t.Fatal("exported before the delay")
	}
	p.kill9()

	p.start("--export-delay", "100ms")
	for name, want := range map[string][]byte{"d/small": small, "big": big} {
		got, err := os.ReadFile(filepath.Join(p.mnt, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s after kill -9: %d bytes, %v", name, len(got), err)
		}
	}
	st, _ = os.Stat(filepath.Join(p.mnt, "big"))
	if st.Sys().(*syscall.Stat_t).Ino != ino {
		t.Fatal("inode number changed across the restart")
	}
	waitFor(t, "the pending exports to resume", func() bool {
		b, ok := p.object("big")
		s, ok2 := p.object("d/small")
		return ok && ok2 && bytes.Equal(b, big) && bytes.Equal(s, small)
	})
}

func TestKill9DuringAnUploadLeavesNoPartialObject(t *testing.T) {
	p := newFS(t)
	// Write with exports held off: a writer stalled for longer than a short
	// export delay (a loaded machine) would rightly see a first part of the
	// file exported, whole, before the upload this test means to cut.
	p.start("--export-delay", "1h")
	data := randomBytes(96 << 20)
	writeSynced(t, filepath.Join(p.mnt, "huge"), data)
	p.stop()
	p.start("--export-delay", "50ms")
	// Kill as soon as the multipart upload is under way.
	waitFor(t, "the upload to start", func() bool {
		out, err := exec.Command(binary, "status", "--state-dir", p.stateDir, "--json").Output()
		return err == nil && !strings.Contains(string(out), `"Multipart": 0,`)
	})
	p.kill9()
	// The embedded store died with the process; its posix backend keeps
	// each object as a file, so look at the file: a partial upload would
	// show there.
	if b, err := os.ReadFile(filepath.Join(p.stateDir, "s3", "data", "bucketfs", "huge")); err == nil && !bytes.Equal(b, data) {
		t.Fatalf("a partial object of %d bytes is in the bucket", len(b))
	}
	p.start("--export-delay", "50ms")
	waitFor(t, "the export to finish after restart", func() bool {
		b, ok := p.object("huge")
		return ok && bytes.Equal(b, data)
	})
}

func TestKill9DuringARenameOfAThousandFilesLosesNothing(t *testing.T) {
	p := newFS(t)
	p.start("--export-delay", "50ms")
	src := filepath.Join(p.mnt, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%04d", i)), []byte(fmt.Sprint(i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p.run("flush")
	if n := len(p.keys("src/")); n < 1000 {
		t.Fatalf("flush exported %d of 1000 files", n)
	}
	if err := os.Rename(src, filepath.Join(p.mnt, "dst")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bucket-side rename to start", func() bool { return len(p.keys("dst/")) > 0 })
	p.kill9()
	p.start("--export-delay", "50ms")
	deadline := time.Now().Add(60 * time.Second)
	for len(p.keys("dst/")) != 1001 || len(p.keys("src/")) != 0 { // 1000 files and the marker
		if time.Now().After(deadline) {
			c, bucket := p.s3()
			var about []string
			for _, k := range p.keys("src/") {
				h, err := c.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: &k})
				if err != nil {
					about = append(about, fmt.Sprintf("%s: %v", k, err))
					continue
				}
				about = append(about, fmt.Sprintf("%s: etag %s version %s metadata %v", k, aws.ToString(h.ETag), aws.ToString(h.VersionId), h.Metadata))
			}
			t.Fatalf("rename incomplete after restart: dst/ has %d keys, src/ has %v\n%s\n%s",
				len(p.keys("dst/")), p.keys("src/"), strings.Join(about, "\n"), p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, i := range []int{0, 499, 999} {
		b, ok := p.object(fmt.Sprintf("dst/f%04d", i))
		if !ok || string(b) != fmt.Sprint(i) {
			t.Fatalf("dst/f%04d = %q", i, b)
		}
	}
	ents, err := os.ReadDir(filepath.Join(p.mnt, "dst"))
	if err != nil || len(ents) != 1000 {
		t.Fatalf("dst lists %d entries, %v", len(ents), err)
	}
}

func TestStatusAndFlushReportAndExport(t *testing.T) {
	p := newFS(t)
	p.start("--export-delay", "1h")
	writeSynced(t, filepath.Join(p.mnt, "pending.txt"), []byte("waiting"))
	out := p.run("status")
	if !strings.Contains(out, "running") || !strings.Contains(out, "pending exports   1 (7 B)") {
		t.Fatalf("status of a running file system:\n%s", out)
	}
	p.run("flush", filepath.Join(p.mnt, "pending.txt"))
	if b, ok := p.object("pending.txt"); !ok || string(b) != "waiting" {
		t.Fatalf("flush returned before the bucket had the file (%q, %v)", b, ok)
	}
	out = p.run("status")
	if !strings.Contains(out, "pending exports   0") || !strings.Contains(out, "exported          1") {
		t.Fatalf("status after flush:\n%s", out)
	}
	writeSynced(t, filepath.Join(p.mnt, "later.txt"), []byte("later"))
	p.stop()
	out = p.run("status")
	if !strings.Contains(out, "stopped") || !strings.Contains(out, "pending exports   1 (5 B)") {
		t.Fatalf("status of a stopped file system:\n%s", out)
	}
	if _, err := exec.Command(binary, "flush", "--state-dir", p.stateDir).CombinedOutput(); err == nil {
		t.Fatal("flush of a stopped file system succeeded")
	}
}

func TestKill9AfterACheckpointKeepsDataNeverFsynced(t *testing.T) {
	p := newFS(t)
	p.start("--export-delay", "1h", "--checkpoint-interval", "100ms")
	small, big := []byte("written, closed, never fsynced\n"), randomBytes(8<<20)
	for name, data := range map[string][]byte{"small": small, "big": big} {
		if err := os.WriteFile(filepath.Join(p.mnt, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	written := time.Now()
	waitFor(t, "a checkpoint that started after the writes", func() bool {
		var st struct {
			LastCheckpoint time.Time `json:"last_checkpoint"`
		}
		return json.Unmarshal([]byte(p.run("status", "--json")), &st) == nil && st.LastCheckpoint.After(written)
	})
	p.kill9()

	p.start("--export-delay", "1h")
	for name, want := range map[string][]byte{"small": small, "big": big} {
		got, err := os.ReadFile(filepath.Join(p.mnt, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s after kill -9: %d bytes (want %d), %v", name, len(got), len(want), err)
		}
	}
}
