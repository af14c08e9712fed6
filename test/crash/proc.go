package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"bucketfs/internal/fusetest"
	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3local"
)

// fsProc is one `bucketfs mount` process, started again on the same state
// directory after each kill.
type fsProc struct {
	bin, stateDir, mnt, logPath string
	storeArgs                   []string       // --s3-listen, or --bucket and --endpoint
	env                         []string       // credentials of a separate store
	pg                          *pgtest.Server // the PostgreSQL of --meta, if any
	cmd                         *exec.Cmd
	exited                      chan struct{}
}

// start runs bucketfs and returns once the mount is there.
func (p *fsProc) start(ctx context.Context) error {
	args := append([]string{"mount", "--state-dir", p.stateDir, "--export-delay", "200ms",
		"--checkpoint-interval", "1s", "--poll-interval", "0", "--revalidate-ttl", "0"}, p.storeArgs...)
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "=== %s: bucketfs %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd := exec.Command(p.bin, append(args, p.mnt)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), p.env...)
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(p.exited)
	return poll(ctx, 60*time.Second, "the mount", func() (bool, error) {
		select {
		case <-p.exited:
			return false, fmt.Errorf("bucketfs exited before mounting (%v); log: %s", cmd.ProcessState, p.logPath)
		default:
		}
		return fusetest.Mounted(p.mnt), nil
	})
}

func (p *fsProc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill9 kills bucketfs with SIGKILL and clears the dead mount.
func (p *fsProc) kill9() error {
	if p.running() {
		p.cmd.Process.Signal(syscall.SIGKILL)
		// The dying process may wait on its own dead mount
		// (fusetest.Abort explains).
		fusetest.Abort(p.mnt)
		<-p.exited
	}
	return unmount(p.mnt)
}

// stop asks bucketfs to exit (SIGTERM), kills it if it does not within
// 30 s, and clears the mount in any case.
func (p *fsProc) stop() error {
	var err error
	if p.running() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			err = errors.New("bucketfs did not exit within 30 s of SIGTERM; killed")
			p.cmd.Process.Signal(syscall.SIGKILL)
			fusetest.Abort(p.mnt)
			<-p.exited
		}
	}
	return errors.Join(err, unmount(p.mnt))
}

func unmount(mnt string) error {
	if !fusetest.Mounted(mnt) {
		return nil
	}
	if out, err := exec.Command("fusermount3", "-u", "-z", mnt).CombinedOutput(); err != nil && fusetest.Mounted(mnt) {
		return fmt.Errorf("fusermount3 -u -z %s: %v %s", mnt, err, out)
	}
	return nil
}

// poll calls cond every 10 ms until it is true, fails, or the deadline or
// ctx ends.
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// storeProc is the separate store: this program run again with
// -serve-store, a process the kill does not touch.
type storeProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	env    map[string]string
}

// startStore starts the separate store on dir and addr and returns once
// it wrote dir/s3.env (its bucket exists by then).
func startStore(ctx context.Context, dir, addr, logPath string) (*storeProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(exe, "-serve-store", dir, "-listen", addr)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &storeProc{cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(s.exited) }()
	envPath := filepath.Join(dir, "s3.env")
	err = poll(ctx, 60*time.Second, "the separate store", func() (bool, error) {
		select {
		case <-s.exited:
			return false, fmt.Errorf("store exited (%v); log: %s", cmd.ProcessState, logPath)
		default:
		}
		_, err := os.Stat(envPath)
		return err == nil, nil
	})
	if err == nil {
		s.env, err = readEnv(envPath)
	}
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *storeProc) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
	}
}

// serveStore is the hidden -serve-store mode: run the store until SIGTERM.
func serveStore(dir, listen string) error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	srv, err := s3local.Start(ctx, s3local.Config{Dir: dir, Listen: listen})
	if err != nil {
		return err
	}
	if err := srv.WriteEnvFile(filepath.Join(dir, "s3.env")); err != nil {
		srv.Close()
		return err
	}
	<-ctx.Done()
	return srv.Close()
}

// readEnv reads an s3.env file.
func readEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env, sc.Err()
}

func s3Client(env map[string]string) *s3.Client {
	return s3.New(s3.Options{
		Region:       env["AWS_REGION"],
		BaseEndpoint: aws.String(env["AWS_ENDPOINT_URL"]),
		UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(
			env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// adminStatus is the part of `bucketfs status --json` the kill plans use.
type adminStatus struct {
	LastCheckpoint time.Time `json:"last_checkpoint"`
	S3             struct {
		Put       uint64 `json:"put"`
		Copy      uint64 `json:"copy"`
		Delete    uint64 `json:"delete"`
		Multipart uint64 `json:"multipart"`
	} `json:"s3"`
}

func (a adminStatus) writes() uint64 { return a.S3.Put + a.S3.Copy + a.S3.Delete + a.S3.Multipart }

// status asks the running bucketfs over its admin socket.
func status(ctx context.Context, stateDir string) (adminStatus, error) {
	var st adminStatus
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(stateDir, "admin.sock"))
	}}}
	req, err := http.NewRequestWithContext(ctx, "GET", "http://bucketfs/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status: %s: %s", resp.Status, b)
	}
	return st, json.Unmarshal(b, &st)
}

// flush runs `bucketfs flush`: every pending change is exported when it
// returns.
func (p *fsProc) flush(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, p.bin, "flush", "--state-dir", p.stateDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bucketfs flush: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
