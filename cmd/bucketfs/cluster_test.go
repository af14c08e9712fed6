package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"bucketfs/internal/engine"
	"bucketfs/internal/fusetest"
	"bucketfs/internal/nfsclient"
	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3local"
	"bucketfs/internal/s3test"
)

// The cluster tests run one file system as issue 23 deploys it: three
// `bucketfs` processes (two `serve` over NFS, one `mount` over FUSE) on one
// PostgreSQL and one bucket in a store outside all of them, everything on
// loopback and every part real. The binary is the one TestMain built.

// clusterOptions are the settings every server of a cluster shares.
type clusterOptions struct {
	exportDelay time.Duration // --export-delay; zero means 200 ms
}

// cluster is one file system served by three processes.
type cluster struct {
	t       *testing.T
	pg      *pgtest.Server
	metaURL string
	store   *s3local.Server
	bucket  string
	s3      *s3.Client
	opts    clusterOptions
	logDir  string
	// servers are, in order, the two NFS servers and the FUSE mount.
	servers []*server
}

// server is one bucketfs process of a cluster.
type server struct {
	c        *cluster
	name     string // nfs-a, nfs-b, fuse
	stateDir string
	nfsAddr  string // serve only
	mnt      string // mount only
	logPath  string
	cmd      *exec.Cmd
	exited   chan struct{} // closed once cmd has been waited for
	// nfs is a client of this server's NFS listener (serve only).
	nfs *nfsclient.Client
}

// startCluster starts PostgreSQL, a bucket in the test binary's store and
// the three servers, nfs-a first (so that it takes the sync lease), and
// connects an NFSv4.1 client to each NFS server.
func startCluster(t *testing.T, opts clusterOptions) *cluster {
	t.Helper()
	if opts.exportDelay == 0 {
		opts.exportDelay = 200 * time.Millisecond
	}
	c := &cluster{t: t, pg: pgtest.Start(t), opts: opts}
	c.metaURL = c.pg.NewDatabase(t)
	c.store, c.bucket = s3test.NewBucket(t)
	c.s3 = s3.New(s3.Options{BaseEndpoint: aws.String(c.store.Endpoint), Region: c.store.Region, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(c.store.AccessKey, c.store.SecretKey, "")})
	// The logs live apart from t.TempDir so that a failing test can show
	// them from its cleanups, which run before t.TempDir's removal is
	// certain to have waited for every writer.
	dir, err := os.MkdirTemp("", "bucketfs-cluster-logs-")
	if err != nil {
		t.Fatal(err)
	}
	c.logDir = dir
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range c.servers {
				l := s.log()
				if i := strings.Index(l, "SIGQUIT: quit"); i >= 0 {
					l = l[:i] + "(then its goroutines: see the hang report)"
				}
				t.Logf("log of %s (%s):\n%s", s.name, s.stateDir, tail(l, 6000))
			}
		}
		os.RemoveAll(dir)
	})
	for _, name := range []string{"nfs-a", "nfs-b", "fuse"} {
		s := &server{c: c, name: name, stateDir: t.TempDir(), logPath: filepath.Join(dir, name+".log")}
		if name == "fuse" {
			s.mnt = t.TempDir()
		} else {
			s.nfsAddr = freeAddr(t)
		}
		c.servers = append(c.servers, s)
		s.start()
	}
	return c
}

func (c *cluster) nfsA() *server { return c.servers[0] }
func (c *cluster) nfsB() *server { return c.servers[1] }
func (c *cluster) fuse() *server { return c.servers[2] }

// env is the servers' environment: the store's credentials and none of
// the caller's AWS settings.
func (c *cluster) env() []string {
	// GOTRACEBACK=all: a SIGQUIT (dumpGoroutines) prints every goroutine.
	return storeEnv("GOTRACEBACK=all", "AWS_ACCESS_KEY_ID="+c.store.AccessKey, "AWS_SECRET_ACCESS_KEY="+c.store.SecretKey,
		"AWS_REGION="+c.store.Region)
}

// start runs the server's process and waits until it serves, then (for
// serve) connects an NFS client to it.
func (s *server) start() {
	t := s.c.t
	t.Helper()
	args := []string{"serve"}
	if s.mnt != "" {
		args = []string{"mount"}
	}
	args = append(args, "--meta", s.c.metaURL, "--bucket", "s3://"+s.c.bucket, "--endpoint", s.c.store.Endpoint,
		"--state-dir", s.stateDir, "--export-delay", s.c.opts.exportDelay.String(), "--log-level", "debug")
	if s.mnt != "" {
		args = append(args, s.mnt)
	} else {
		args = append(args, "--nfs-listen", s.nfsAddr, "--root-squash=false")
	}
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := exec.Command(binary, args...)
	cmd.Env = s.c.env()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	t.Cleanup(func() { s.kill9() })
	waitForOrExit(t, s, func() bool {
		if s.mnt != "" {
			return fusetest.Mounted(s.mnt)
		}
		return strings.Contains(s.log(), "over NFS on")
	})
	if s.mnt == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Renewals keep the client's lease (and session) whatever the
		// test waits for: the lease of serve --meta is half the server
		// lease (5 s; nfs4's identity.go), so renew well within it.
		cl, err := nfsclient.Dial(ctx, s.nfsAddr, nfsclient.Config{MinorVersion: 1, RenewInterval: time.Second})
		if err != nil {
			t.Fatalf("connect to %s: %v", s.name, err)
		}
		t.Cleanup(func() { cl.Close() })
		s.nfs = cl
	}
}

// waitForOrExit polls cond until it holds, failing the test if the
// server's process exits first or a minute passes.
func waitForOrExit(t *testing.T, s *server, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		select {
		case <-s.exited:
			t.Fatalf("%s exited while starting: %v\n%s", s.name, s.cmd.ProcessState, tail(s.log(), 4000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start within a minute:\n%s", s.name, tail(s.log(), 4000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether the server's process still runs.
func (s *server) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// kill9 kills the process with SIGKILL (if it still runs), waits for it,
// and clears its mount.
func (s *server) kill9() {
	if s.alive() {
		s.cmd.Process.Signal(syscall.SIGKILL)
	}
	if s.mnt != "" {
		// The dying process may wait on its own dead mount (fusetest.Abort).
		fusetest.Abort(s.mnt)
	}
	<-s.exited
	if s.mnt != "" {
		exec.Command("fusermount3", "-u", "-z", s.mnt).Run()
	}
}

// dumpGoroutines asks the process for its goroutines' stacks (SIGQUIT
// makes the Go runtime print them to stderr and exit) and returns them;
// the process is gone afterwards.
func (s *server) dumpGoroutines() string {
	if !s.alive() {
		return "(" + s.name + " had exited)"
	}
	before := len(s.log())
	s.cmd.Process.Signal(syscall.SIGQUIT)
	// The runtime prints the goroutines in a moment and exits; the exit
	// of a FUSE server may then wait on its own mount (kill9 clears it).
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
	}
	s.kill9()
	l := s.log()
	if len(l) < before {
		return l
	}
	return l[before:]
}

// log returns what the process wrote so far.
func (s *server) log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// status asks the server for `bucketfs status` over its admin socket,
// giving up after timeout.
func (s *server) status(timeout time.Duration) (engine.Status, error) {
	var st engine.Status
	admin := adminClient(s.stateDir)
	admin.Timeout = timeout
	resp, err := admin.Get("http://bucketfs/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return st, fmt.Errorf("status: %s: %s", resp.Status, b)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// flush asks the server for `bucketfs flush` (everything pending) and
// returns once the bucket has it, or after timeout.
func (s *server) flush(timeout time.Duration) error {
	admin := adminClient(s.stateDir)
	admin.Timeout = timeout
	return requestFlush(admin, "http://bucketfs/flush")
}

// leader returns the server whose process holds the sync lease, as the
// live servers' status says, or nil if none does.
func (c *cluster) leader() *server {
	for _, s := range c.servers {
		if !s.alive() {
			continue
		}
		st, err := s.status(5 * time.Second)
		if err != nil || st.Lease == nil || st.Lease.Holder == "" {
			continue
		}
		for _, srv := range st.Servers {
			if srv.ID != st.Lease.Holder {
				continue
			}
			for _, cand := range c.servers {
				if cand.alive() && cand.cmd.Process.Pid == srv.PID {
					return cand
				}
			}
		}
	}
	return nil
}

// bucketObjects reads every object of the bucket: key to body, and key to
// its user metadata.
func (c *cluster) bucketObjects(ctx context.Context) (map[string][]byte, map[string]map[string]string, error) {
	bodies, mds := map[string][]byte{}, map[string]map[string]string{}
	pg := s3.NewListObjectsV2Paginator(c.s3, &s3.ListObjectsV2Input{Bucket: &c.bucket})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, nil, err
		}
		for _, o := range page.Contents {
			out, err := c.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &c.bucket, Key: o.Key})
			if err != nil {
				var code interface{ ErrorCode() string }
				if errors.As(err, &code) && code.ErrorCode() == "NoSuchKey" {
					continue // deleted since the listing
				}
				return nil, nil, err
			}
			b, err := io.ReadAll(out.Body)
			out.Body.Close()
			if err != nil {
				return nil, nil, err
			}
			bodies[*o.Key], mds[*o.Key] = b, out.Metadata
		}
	}
	return bodies, mds, nil
}

// opDeadline bounds every operation of the cluster tests: one that has not
// returned by then is taken for a hang.
const opDeadline = 60 * time.Second

// fuseStaleness bounds how long a FUSE mount may show a state older than
// another server's change: the README's 1 s (kernel caches of names and
// attributes) with room for a busy machine.
const fuseStaleness = 3 * time.Second

// errHung is a call that did not return within its deadline.
var errHung = errors.New("no answer within the deadline (hung)")

// bounded runs fn and returns its error, or errHung once d has passed; a
// hung fn is left running (the test fails, and its cleanups kill the
// server it waits on).
func bounded[T any](d time.Duration, fn func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		if r.err != nil && ctx.Err() != nil {
			return r.v, fmt.Errorf("%w: %v", errHung, r.err)
		}
		return r.v, r.err
	case <-time.After(d + time.Second):
		var zero T
		return zero, errHung
	}
}

// framePointers are the register values a SIGQUIT dump adds to each
// frame's line, left out of the report.
var framePointers = regexp.MustCompile(` fp=0x[0-9a-f]+ sp=0x[0-9a-f]+ pc=0x[0-9a-f]+`)

// hangReport collects the goroutines of every live server (SIGQUIT, which
// ends them), keeps the dumps in a directory that outlives the test, and
// returns where, with the goroutines of bucketfs that waited a minute or
// more and those in the PostgreSQL store or a flush.
func (c *cluster) hangReport() string {
	dir, err := os.MkdirTemp("", "bucketfs-cluster-hang-")
	if err != nil {
		return err.Error()
	}
	var out strings.Builder
	fmt.Fprintf(&out, "goroutine dumps in %s\n", dir)
	for _, s := range c.servers {
		if !s.alive() {
			continue
		}
		dump := s.dumpGoroutines()
		os.WriteFile(filepath.Join(dir, s.name+".txt"), []byte(dump), 0o644)
		fmt.Fprintf(&out, "=== %s: goroutines of bucketfs waiting a minute or more, in the PostgreSQL store or in a flush:\n", s.name)
		n := 0
		for _, g := range strings.Split(dump, "\n\n") {
			waits := strings.Contains(g, "minutes]") && strings.Contains(g, "bucketfs/internal/")
			if waits || strings.Contains(g, "kv/postgres") || strings.Contains(g, "Flush") {
				if n < 40 {
					out.WriteString(framePointers.ReplaceAllString(g, "") + "\n\n")
				}
				n++
			}
		}
		fmt.Fprintf(&out, "(%d such goroutines)\n", n)
	}
	return out.String()
}
