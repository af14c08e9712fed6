//go:build kernelnfs

package kernelnfs

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3test"
)

var (
	long     = flag.Bool("kernelnfs.long", false, "also mount with more option sets (nconnect, rsize/wsize, soft, negotiated version)")
	guestFor = flag.Duration("kernelnfs.timeout", 25*time.Minute, "how long the guest may run")
	accel    = flag.String("kernelnfs.accel", "tcg,thread=multi", "QEMU accelerator (kvm where the host can run guests)")
	guestRun = flag.String("kernelnfs.run", "", "run only the guest tests that match this -test.run pattern")
)

// The guest reaches the servers at these ports of serverAddr (guestfwd);
// each connection is relayed to the server's real port on 127.0.0.1.
const (
	guestDefaultPort = "2049"
	guestTrustedPort = "2050"
	guestControlPort = "2051" // serveControl
	guestSharedAPort = "2052" // two servers of one file system on PostgreSQL
	guestSharedBPort = "2053"
	relayArg         = "kernelnfs-relay"
)

func TestMain(m *testing.M) {
	// QEMU starts this binary as `BINARY kernelnfs-relay ADDR` for every
	// connection the guest opens to a forwarded port, with the connection
	// on stdin and stdout.
	if len(os.Args) == 3 && os.Args[1] == relayArg {
		os.Exit(relay(os.Args[2]))
	}
	os.Exit(s3test.Main(pgtest.M(m)))
}

// relay joins stdin and stdout to a TCP connection to addr until either
// side is done.
func relay(addr string) int {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		io.Copy(c, os.Stdin)
		c.(*net.TCPConn).CloseWrite()
	}()
	io.Copy(os.Stdout, c)
	return 0
}

// The mount sets the smoke workload uses, as VERS[:OPTION...]: each minor
// version, with the options users reach for spread over them (hard is the
// default).
var (
	smokeMounts = []string{"4.0", "4.1:nconnect=4", "4.2:rsize=65536:wsize=65536:soft"}
	longMounts  = []string{"4.0:soft:timeo=50", "4.1", "4.1:rsize=1048576:wsize=1048576", "4.2", "4.2:nconnect=4:hard"}
)

func TestTheLinuxKernelClientMountsBucketfsAndWhatItWritesReachesTheBucket(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 (.ci/run does)")
	}
	k := fetchKernel(t)
	work := t.TempDir()
	bin := filepath.Join(work, "bucketfs")
	goBuild(t, nil, "build", "-o", bin, "bucketfs/cmd/bucketfs")
	guest := filepath.Join(work, "guest.test")
	goBuild(t, []string{"CGO_ENABLED=0"}, "test", "-c", "-tags", "kernelnfs", "-o", guest, "bucketfs/test/kernelnfs/guest")
	initrd := filepath.Join(work, "initrd")
	buildInitramfs(t, k, guest, initrd)

	def := startServe(t, bin, filepath.Join(work, "default"), "--uid", "1000", "--gid", "1000")
	trusted := startServe(t, bin, filepath.Join(work, "trusted"), "--root-squash=false")
	shared := startSharedPair(t, bin, work)
	control := &server{addr: serveControl(t, map[string]*server{"default": def, "trusted": trusted,
		"shared-a": shared.a, "shared-b": shared.b})}

	mounts, restartVers := smokeMounts, []string{"4.1", "4.2"}
	if *long {
		mounts = append(mounts, longMounts...)
		restartVers = append(restartVers, "4.0") // 4.0 clients cannot end the grace period early
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	console, results := filepath.Join(work, "console.log"), filepath.Join(work, "results.log")
	fwd := func(guestPort string, s *server) string {
		return fmt.Sprintf("guestfwd=tcp:10.0.2.100:%s-cmd:%s %s %s", guestPort, self, relayArg, s.addr)
	}
	args := []string{"-accel", *accel, "-cpu", "max", "-m", "1024", "-smp", "2",
		"-nodefaults", "-no-reboot", "-display", "none", "-monitor", "none",
		"-kernel", k.vmlinuz(), "-initrd", initrd,
		"-append", strings.Join([]string{"console=ttyS0", "quiet", "loglevel=3", "panic=-1",
			"KN_DEFAULT_PORT=" + guestDefaultPort, "KN_TRUSTED_PORT=" + guestTrustedPort,
			"KN_CONTROL_PORT=" + guestControlPort, "KN_MOUNTS=" + strings.Join(mounts, "/"),
			"KN_RESTART_VERS=" + strings.Join(restartVers, "/"),
			"KN_SHARED_A_PORT=" + guestSharedAPort, "KN_SHARED_B_PORT=" + guestSharedBPort,
			"KN_RUN=" + *guestRun, "KN_SHARED_PAIRS=" + os.Getenv("KN_SHARED_PAIRS")}, " "),
		"-serial", "file:" + console, "-serial", "file:" + results,
		// restrict=on: the guest reaches nothing but the forwards: the
		// four NFS servers and the control port (serveControl).
		"-netdev", "user,id=n0,restrict=on," + fwd(guestDefaultPort, def) + "," + fwd(guestTrustedPort, trusted) +
			"," + fwd(guestControlPort, control) + "," + fwd(guestSharedAPort, shared.a) + "," + fwd(guestSharedBPort, shared.b),
		// romfile= : no boot ROM (the guest boots from -kernel), so
		// ipxe-qemu need not be installed.
		"-device", "virtio-net-pci,netdev=n0,romfile=", "-device", "virtio-rng-pci"}
	ctx, cancel := context.WithTimeout(t.Context(), *guestFor)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, qemu, args...)
	var qemuOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &qemuOut, &qemuOut
	err = cmd.Run()
	t.Logf("the guest ran %s", time.Since(start).Round(time.Second))
	out, _ := os.ReadFile(console)
	t.Logf("guest console:\n%s", out)
	if err != nil {
		t.Fatalf("qemu: %v\n%s", err, qemuOut.Bytes())
	}
	checkGuestTests(t, out)

	// What the guest wrote through the default server is in its bucket,
	// and what it wrote through the two servers of one file system in
	// theirs.
	def.flush(t)
	shared.a.flush(t)
	exps := readExpectations(t, results)
	if len(exps) == 0 {
		t.Fatal("the guest reported nothing to find in the bucket")
	}
	c, bucket := def.s3(t)
	checkBucket(t, "default", c, bucket, exps)
	checkBucket(t, "shared", shared.s3, shared.bucket, exps)
	t.Logf("%d objects checked in the buckets", len(exps))
}

// sharedPair is two `bucketfs serve` of one file system: its metadata in
// a PostgreSQL database the test starts, its bucket in the test binary's
// own store (s3test).
type sharedPair struct {
	a, b   *server
	s3     *s3.Client
	bucket string
}

func startSharedPair(t *testing.T, bin, work string) *sharedPair {
	t.Helper()
	meta := pgtest.Start(t).NewDatabase(t)
	store, bucket := s3test.NewBucket(t)
	env := []string{"AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_ACCESS_KEY_ID=" + store.AccessKey, "AWS_SECRET_ACCESS_KEY=" + store.SecretKey, "AWS_REGION=" + store.Region}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	flags := []string{"--meta", meta, "--bucket", "s3://" + bucket, "--endpoint", store.Endpoint, "--root-squash=false"}
	p := &sharedPair{bucket: bucket}
	p.a = startServeEnv(t, bin, filepath.Join(work, "shared-a"), env, flags...)
	p.b = startServeEnv(t, bin, filepath.Join(work, "shared-b"), env, flags...)
	p.s3 = s3.New(s3.Options{BaseEndpoint: aws.String(store.Endpoint), Region: store.Region, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(store.AccessKey, store.SecretKey, "")})
	return p
}

// checkGuestTests fails the test for each guest test that failed and when
// the guest did not finish.
func checkGuestTests(t *testing.T, console []byte) {
	t.Helper()
	exit := -1
	sc := bufio.NewScanner(bytes.NewReader(console))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "--- FAIL: "); i >= 0 {
			t.Errorf("in the guest: %s", strings.TrimSpace(line[i:]))
		}
		if s, ok := strings.CutPrefix(strings.TrimSpace(line), "KERNELNFS-EXIT "); ok {
			exit, _ = strconv.Atoi(s)
		}
		if strings.Contains(line, "KERNELNFS-SETUP-FAILED") {
			t.Errorf("the guest could not set itself up: %s", line)
		}
	}
	if exit != 0 {
		t.Errorf("the guest's tests ended with %d (-1: they did not finish)", exit)
	}
}

// expectation mirrors guest.Expectation.
type expectation struct {
	Server string
	Key    string
	Absent bool
	Size   int
	SHA256 string
	Mode   uint32
	UID    uint32
	GID    uint32
}

func readExpectations(t *testing.T, path string) []expectation {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var exps []expectation
	for _, line := range strings.Split(string(data), "\n") {
		_, js, ok := strings.Cut(line, "KERNELNFS-EXPECT ")
		if !ok {
			continue
		}
		var e expectation
		if err := json.Unmarshal([]byte(strings.TrimSpace(js)), &e); err != nil {
			t.Fatalf("a report from the guest does not decode: %q: %v", line, err)
		}
		exps = append(exps, e)
	}
	return exps
}

// checkBucket compares a bucket with what the guest expects of the
// server (or servers) called name, object by object: bytes, size, and
// the attributes in the object's metadata.
func checkBucket(t *testing.T, name string, c *s3.Client, bucket string, exps []expectation) {
	t.Helper()
	ctx := t.Context()
	for _, e := range exps {
		if e.Server != name {
			continue
		}
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &e.Key})
		var missing *types.NoSuchKey
		switch {
		case e.Absent && errors.As(err, &missing):
			continue
		case e.Absent && err == nil:
			out.Body.Close()
			t.Errorf("%s: in the bucket, but the guest removed it", e.Key)
			continue
		case err != nil:
			t.Errorf("%s: %v", e.Key, err)
			continue
		}
		body, err := io.ReadAll(out.Body)
		out.Body.Close()
		if err != nil {
			t.Errorf("%s: %v", e.Key, err)
			continue
		}
		sum := sha256.Sum256(body)
		if len(body) != e.Size || hex.EncodeToString(sum[:]) != e.SHA256 {
			t.Errorf("%s: the bucket holds %d bytes (sha256 %x), the guest wrote %d (%s)", e.Key, len(body), sum, e.Size, e.SHA256)
		}
		md := out.Metadata
		mode, _ := strconv.ParseUint(md["mode"], 10, 32)
		uid, _ := strconv.ParseUint(md["uid"], 10, 32)
		gid, _ := strconv.ParseUint(md["gid"], 10, 32)
		if uint32(mode)&0o7777 != e.Mode || uint32(uid) != e.UID || uint32(gid) != e.GID {
			t.Errorf("%s: the object says mode %o uid %d gid %d, the guest made %o %d %d", e.Key, mode&0o7777, uid, gid, e.Mode, e.UID, e.GID)
		}
	}
}

// goBuild runs the go command from this module.
func goBuild(t *testing.T, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// server is a `bucketfs serve` on this host's loopback. It can be stopped
// and started again on the same port and state directory.
type server struct {
	bin, stateDir, addr string
	flags               []string
	env                 []string // nil: this process's

	mu     sync.Mutex
	log    bytes.Buffer
	cmd    *exec.Cmd
	exited chan struct{}
}

func (s *server) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.Write(p)
}

func (s *server) logText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// startServe starts `bucketfs serve` on the embedded store with its own
// state directory, the NFS port on a free loopback port, and flags; it is
// stopped (SIGTERM) with the test.
func startServe(t *testing.T, bin, stateDir string, flags ...string) *server {
	t.Helper()
	return startServeEnv(t, bin, stateDir, nil, flags...)
}

// startServeEnv is startServe with the server's environment.
func startServeEnv(t *testing.T, bin, stateDir string, env []string, flags ...string) *server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &server{bin: bin, stateDir: stateDir, addr: addr, flags: flags, env: env}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.stop(syscall.SIGTERM)
		if t.Failed() || testing.Verbose() {
			t.Logf("serve %v log:\n%s", flags, s.logText())
		}
	})
	return s
}

// start runs the server and returns once it listens.
func (s *server) start() error {
	ready := strings.Count(s.logText(), "over NFS on")
	cmd := exec.Command(s.bin, append([]string{"serve", "--state-dir", s.stateDir, "--nfs-listen", s.addr}, s.flags...)...)
	cmd.Stdout, cmd.Stderr = s, s
	cmd.Env = s.env
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for strings.Count(s.logText(), "over NFS on") == ready {
		select {
		case <-exited:
			return fmt.Errorf("bucketfs serve %v exited:\n%s", s.flags, s.logText())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bucketfs serve %v did not come up:\n%s", s.flags, s.logText())
		}
	}
	return nil
}

// stop signals the server and waits for it to exit (killing it after 30 s).
func (s *server) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}

// serveControl answers the guest's requests, one per connection: a line
// "restart-term NAME" (SIGTERM) or "restart-kill NAME" (SIGKILL), answered
// "ok" once the server listens again on the same port and state
// directory, or "error: ..."; "kill NAME" (SIGKILL, not started again)
// and "start NAME", answered "ok" once it is down or listens; or "time",
// answered with this host's clock
// in Unix nanoseconds, which the guest sets its own by. It returns its
// address.
func serveControl(t *testing.T, servers map[string]*server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var mu sync.Mutex // one restart at a time
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				if strings.TrimSpace(line) == "time" {
					// The guest has no clock of its own worth the name.
					fmt.Fprintln(c, time.Now().UnixNano())
					return
				}
				f := strings.Fields(line)
				sig := map[string]syscall.Signal{"restart-term": syscall.SIGTERM, "restart-kill": syscall.SIGKILL, "kill": syscall.SIGKILL}
				if len(f) != 2 || servers[f[1]] == nil || sig[f[0]] == 0 && f[0] != "start" {
					fmt.Fprintf(c, "error: unknown request %q\n", line)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				s := servers[f[1]]
				t0 := time.Now()
				if f[0] != "start" {
					s.stop(sig[f[0]])
				}
				t1 := time.Now()
				var err error
				if f[0] != "kill" {
					err = s.start()
				}
				t.Logf("%s: stopped in %s, started in %s", strings.TrimSpace(line), t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
				if err != nil {
					fmt.Fprintf(c, "error: %s\n", strings.ReplaceAll(err.Error(), "\n", " | "))
					return
				}
				fmt.Fprintln(c, "ok")
			}()
		}
	}()
	return l.Addr().String()
}

// flush exports everything pending; it returns when the bucket has it.
func (s *server) flush(t *testing.T) {
	t.Helper()
	out, err := exec.Command(s.bin, "flush", "--state-dir", s.stateDir).CombinedOutput()
	if err != nil {
		t.Fatalf("bucketfs flush: %v\n%s", err, out)
	}
}

// s3 is a client of the server's embedded store, from its s3.env.
func (s *server) s3(t *testing.T) (*s3.Client, string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.stateDir, "s3.env"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	c := s3.New(s3.Options{Region: env["AWS_REGION"], BaseEndpoint: aws.String(env["AWS_ENDPOINT_URL"]), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], "")})
	return c, env["BUCKETFS_BUCKET"]
}
