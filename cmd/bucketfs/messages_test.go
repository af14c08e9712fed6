package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"bucketfs/internal/engine"
	"bucketfs/internal/fusetest"
	bsync "bucketfs/internal/sync"
)

// What a new user trips on (issue 22): the texts bucketfs prints.

// No help text shows an escape sequence instead of what it stands for.
func TestHelpTextsShowNoLiteralEscapes(t *testing.T) {
	for _, cmd := range []string{"mount", "serve", "status", "flush", "unmount"} {
		out, err := exec.Command(binary, cmd, "--help").Output()
		if err != nil {
			t.Errorf("bucketfs %s --help: %v", cmd, err)
		}
		if strings.Contains(string(out), `\n`) || strings.Contains(string(out), `\t`) {
			t.Errorf("bucketfs %s --help prints a literal escape:\n%s", cmd, out)
		}
	}
}

// packageDir is this package's directory, the working directory the test
// binary starts in, read before any test starts an embedded store (which
// moves the working directory: see package s3local).
var packageDir, _ = os.Getwd()

// `bucketfs version` names the source even from a build without VCS
// stamping (-buildvcs=false, as GOFLAGS here has it): its module version,
// or that the revision is unknown, never nothing.
func TestVersionNamesTheSourceEvenWithoutVCSStamping(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bucketfs")
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin, ".")
	build.Dir = packageDir // the embedded store moves the working directory (s3local)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=false: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^bucketfs \S+ \((unknown revision|module \S+)\), go1\.`).Match(out) {
		t.Errorf("bucketfs version of a build without VCS stamping: %q, want the module version or \"unknown revision\"", out)
	}
}

// A count of one is printed in the singular, others in the plural.
func TestCountsArePrintedInTheRightNumber(t *testing.T) {
	one := regexp.MustCompile(`\b1 (\w+ )?\w+s\b`)
	for _, n := range []int64{1, 2} {
		st := engine.Status{Bucket: "s3://b/", Listings: []bsync.ListingProgress{{Prefix: "p/", Keys: n}}}
		st.Exported, st.ExportFailures, st.ExportConflicts, st.Imported = n, n, n, n
		st.Data.MetadataOps, st.S3.Retries = n, uint64(n)
		var out bytes.Buffer
		printStatus(&out, &st)
		if m := one.FindAllString(out.String(), -1); n == 1 && len(m) > 0 {
			t.Errorf("status with counts of 1 says %q:\n%s", m, &out)
		}
		if n == 2 && !strings.Contains(out.String(), "2 objects") {
			t.Errorf("status with counts of 2:\n%s", &out)
		}
	}
	for _, tc := range []struct {
		n         int64
		one, many string
		want      string
	}{
		{0, "change", "changes", "0 changes"}, {1, "change", "changes", "1 change"}, {2, "entry", "entries", "2 entries"},
	} {
		if got := count(tc.n, tc.one, tc.many); got != tc.want {
			t.Errorf("count(%d, %q, %q) = %q, want %q", tc.n, tc.one, tc.many, got, tc.want)
		}
	}
}

// A listen address another program holds is named once, on one line.
func TestAListenAddressInUseIsNamedOnceOnOneLine(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for _, args := range [][]string{
		{"mount", "--state-dir", t.TempDir(), "--s3-listen", addr, t.TempDir()},
		{"serve", "--state-dir", t.TempDir(), "--s3-listen", addr, "--nfs-listen", "127.0.0.1:0"},
		{"serve", "--state-dir", t.TempDir(), "--nfs-listen", addr},
	} {
		var stderr bytes.Buffer
		cmd := exec.Command(binary, args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		msg := stderr.String()
		if err == nil || strings.Count(msg, "\n") != 1 || strings.Count(msg, addr) != 1 || !strings.Contains(msg, "in use") {
			t.Errorf("bucketfs %v with %s taken: %v\n%s\nwant one line naming %s once and saying it is in use", args[:1], addr, err, msg, addr)
		}
		if fusetest.Mounted(args[len(args)-1]) {
			t.Errorf("mounted although the store could not start")
		}
	}
}

// flush names the path it was given when that path is wrong.
func TestFlushOfAMissingPathNamesIt(t *testing.T) {
	p := newFS(t)
	p.start()
	missing := filepath.Join(p.mnt, "nosuch")
	out, err := bucketfs("flush", missing)
	if err == nil || !strings.Contains(out, missing) || !strings.Contains(out, "no such file") {
		t.Errorf("flush %s: %v\n%s", missing, err, out)
	}
	p.stop()
}

// The log file of a background mount is one format: every line a record
// with its time, the status lines a terminal would show and the HTTP
// server's complaints included (issue 22).
func TestTheBackgroundLogIsOneFormatWithTimes(t *testing.T) {
	certFile, keyFile, _ := writeCert(t)
	p := newFS(t)
	if err := os.WriteFile(filepath.Join(p.mnt, "hidden.txt"), []byte("under the mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	metrics := freeAddr(t)
	out, err := bucketfs("mount", "--background", "--state-dir", p.stateDir, "--s3-listen", p.s3Addr,
		"--metrics-listen", metrics, "--tls-cert", certFile, "--tls-key", keyFile, p.mnt)
	t.Cleanup(func() {
		if fusetest.Mounted(p.mnt) {
			exec.Command("umount", p.mnt).Run()
		}
	})
	if err != nil {
		t.Fatalf("mount --background: %v\n%s", err, out)
	}
	// A client that does not speak TLS: the HTTPS server logs the failed
	// handshake.
	c, err := net.Dial("tcp", metrics)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET /metrics HTTP/1.0\r\n\r\n"))
	c.Read(make([]byte, 64))
	c.Close()
	logPath := filepath.Join(p.stateDir, "bucketfs.log")
	waitFor(t, "the HTTP server's line in the log", func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "TLS handshake error")
	})
	if out, err := bucketfs("unmount", p.mnt); err != nil {
		t.Fatalf("unmount: %v\n%s", err, out)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	record := regexp.MustCompile(`^time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S* level=(DEBUG|INFO|WARN|ERROR) msg=`)
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if !record.MatchString(line) {
			t.Errorf("a line of the log that is not a record with its time: %q", line)
		}
	}
	for _, want := range []string{"mounted at " + p.mnt, "is not empty", "TLS handshake error", "unmounted " + p.mnt} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the log does not say %q:\n%s", want, b)
		}
	}
}
