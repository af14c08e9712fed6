package main

// The peers: s3fs and rclone mount (full VFS cache), each a child process
// mounting its own bucket of the embedded store, installed from Debian's
// packages if missing.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"bucketfs/internal/bucket"
)

// peerBucket keeps the peers' objects out of bucketfs's bucket, so that
// bucketfs's importer does no work while a peer is measured.
const peerBucket = "peers"

// peers mounts s3fs and rclone and adds them as targets; a peer that cannot
// run is noted and left out.
func (s *suite) peers() {
	st := s.eng.Store
	if err := st.CreateBucket(s.Ctx, peerBucket, false); err != nil {
		s.Note("peers not measured: create bucket %s: %v", peerBucket, err)
		return
	}
	c, err := bucket.New(s.Ctx, bucket.Config{Bucket: peerBucket, Endpoint: st.Endpoint, Region: st.Region,
		AccessKey: st.AccessKey, SecretKey: st.SecretKey})
	if err != nil {
		s.Note("peers not measured: bucket client: %v", err)
		return
	}
	s.Defer(c.Close)
	for _, p := range []struct {
		name, pkg string
		mount     func(mnt string, t *target) (*exec.Cmd, error) // also sets t's hooks
	}{{tS3fs, "s3fs", s.s3fs}, {tRclone, "rclone", s.rclone}} {
		mnt := filepath.Join(s.Base, p.pkg)
		dir := filepath.Join(mnt, p.pkg) // the work area
		t := &target{name: p.name, fs: dirFS(dir), dir: dir, bucket: c, prefix: p.pkg + "/"}
		err := s.install(p.pkg, p.pkg)
		if err == nil {
			err = s.startPeer(p.name, mnt, func(mnt string) (*exec.Cmd, error) { return p.mount(mnt, t) })
		}
		if err == nil {
			err = os.Mkdir(dir, 0o755)
		}
		if err != nil {
			s.Note("%s not measured: %v", p.name, err)
			fmt.Fprintf(os.Stderr, "suite: %s not measured: %v\n", p.name, err)
			continue
		}
		s.targets = append(s.targets, t)
	}
}

// install installs the Debian package pkg with apt-get if bin is not on
// the PATH.
func (s *suite) install(bin, pkg string) error {
	if _, err := exec.LookPath(bin); err == nil {
		return nil
	}
	fmt.Fprintf(os.Stderr, "suite: installing %s with apt-get\n", pkg)
	apt := func(args ...string) error {
		cmd := exec.CommandContext(s.Ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			return fmt.Errorf("apt-get %s: %v: %s", strings.Join(args, " "), err, lines[len(lines)-1])
		}
		return nil
	}
	if err := apt("install", "-y", "-q", pkg); err != nil {
		if err := apt("update", "-q"); err != nil {
			return err
		}
		if err := apt("install", "-y", "-q", pkg); err != nil {
			return err
		}
	}
	s.Note("installed the Debian package %s", pkg)
	_, err := exec.LookPath(bin)
	return err
}

// startPeer starts a peer's foreground mount process on the new directory
// mnt and waits up to 20 s for the mount to appear. Stopping it (a
// cleanup) unmounts mnt and waits for the process.
func (s *suite) startPeer(name, mnt string, mount func(mnt string) (*exec.Cmd, error)) error {
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}
	cmd, err := mount(mnt)
	if err != nil {
		return err
	}
	log := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's SIGINT is ours to pass on
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.Defer(func() {
		if mounted(mnt) {
			if out, err := exec.Command("fusermount3", "-u", mnt).CombinedOutput(); err != nil {
				s.LogErr("fusermount3 -u "+mnt+"; detaching it", fmt.Errorf("%v: %s", err, bytes.TrimSpace(out)))
				syscall.Unmount(mnt, syscall.MNT_DETACH)
			}
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	for deadline := time.Now().Add(20 * time.Second); !mounted(mnt); {
		select {
		case <-exited:
			return fmt.Errorf("%s exited at start (%v): %s", cmd.Path, cmd.ProcessState, lastLines(log.String(), 5))
		case <-s.Ctx.Done():
			return s.Ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not mount within 20 s: %s", cmd.Path, lastLines(log.String(), 5))
		}
	}
	v, _ := exec.Command(cmd.Path, "--version").CombinedOutput()
	s.Note("%s: %s: %s", name, firstLine(string(v)), strings.Join(cmd.Args, " "))
	return nil
}

// s3fs mounts the peer bucket with s3fs in the foreground, path-style on
// the store's plain-HTTP endpoint, signing for its region. It writes an
// object on close, so it leaves no work behind a measurement.
func (s *suite) s3fs(mnt string, _ *target) (*exec.Cmd, error) {
	st := s.eng.Store
	passwd := filepath.Join(s.Base, "s3fs.passwd")
	if err := os.WriteFile(passwd, []byte(st.AccessKey+":"+st.SecretKey+"\n"), 0o600); err != nil {
		return nil, err
	}
	return exec.Command("s3fs", peerBucket, mnt, "-f",
		"-o", "url="+st.Endpoint, "-o", "use_path_request_style", "-o", "endpoint="+st.Region,
		"-o", "passwd_file="+passwd, "-o", "nosuid,nodev"), nil
}

// rclone mounts the peer bucket with rclone's full VFS cache (in the
// temporary directory), its S3 remote configured through the environment.
// Objects PUT through S3 show in the mount only after its directory cache
// (5 min) expires, so t.refresh sends it SIGHUP (flush the directory
// caches) before the suite waits for them, as a user would. It uploads a
// written file 5 s after its close (--vfs-write-back), in the background:
// t.pending asks its remote control (on a free loopback port) how many
// uploads are queued or running, so that they do not run during another
// target's measurement.
func (s *suite) rclone(mnt string, t *target) (*exec.Cmd, error) {
	st := s.eng.Store
	rc, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("rclone", "mount", "peer:"+peerBucket, mnt,
		"--vfs-cache-mode", "full", "--cache-dir", filepath.Join(s.Base, "rclone-cache"),
		"--rc", "--rc-addr", rc, "--rc-no-auth")
	cmd.Env = append(os.Environ(), "RCLONE_CONFIG=/dev/null",
		"RCLONE_CONFIG_PEER_TYPE=s3", "RCLONE_CONFIG_PEER_PROVIDER=Other", "RCLONE_CONFIG_PEER_ENDPOINT="+st.Endpoint,
		"RCLONE_CONFIG_PEER_ACCESS_KEY_ID="+st.AccessKey, "RCLONE_CONFIG_PEER_SECRET_ACCESS_KEY="+st.SecretKey,
		"RCLONE_CONFIG_PEER_REGION="+st.Region, "RCLONE_CONFIG_PEER_FORCE_PATH_STYLE=true")
	t.refresh = func() { cmd.Process.Signal(syscall.SIGHUP) }
	t.pending = func() (int, error) { return rcloneUploads(s.Ctx, rc) }
	return cmd, nil
}

// rcloneUploads returns the uploads that rclone's VFS cache has in
// progress or queued (queued includes those waiting out the write-back
// delay), from its remote control at addr.
func rcloneUploads(ctx context.Context, addr string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/vfs/stats", strings.NewReader("{}"))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var stats struct {
		DiskCache *struct {
			UploadsInProgress int `json:"uploadsInProgress"`
			UploadsQueued     int `json:"uploadsQueued"`
		} `json:"diskCache"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil || resp.StatusCode != http.StatusOK || stats.DiskCache == nil {
		return 0, fmt.Errorf("vfs/stats: %s, %v", resp.Status, err)
	}
	return stats.DiskCache.UploadsInProgress + stats.DiskCache.UploadsQueued, nil
}

// freeAddr returns a loopback address with a port free at the moment.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// mounted reports whether mnt is a mount point.
func mounted(mnt string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == mnt {
			return true
		}
	}
	return false
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

func firstLine(s string) string { return strings.TrimSpace(strings.SplitN(s, "\n", 2)[0]) }
