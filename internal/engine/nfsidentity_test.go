package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// The NFS identity is made once and read back the same at every start; a
// file that holds no identity is refused with a message that names it,
// never replaced silently (its clients' claims would go with it).
func TestTheNFSIdentityIsMadeOnceAndKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), nfsIdentityFile)
	first, err := loadOrMakeIdentity(path)
	if err != nil || first == 0 {
		t.Fatalf("made %x, %v", first, err)
	}
	again, err := loadOrMakeIdentity(path)
	if err != nil || again != first {
		t.Fatalf("read back %x, %v; want %x", again, err, first)
	}
	if _, err := os.Stat(path + ".new"); !os.IsNotExist(err) {
		t.Errorf("the temporary file is left: %v", err)
	}
	for _, bad := range []string{"", "not hex\n", "0000000000000000\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if id, err := loadOrMakeIdentity(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("identity file %q gave %x, %v; want an error naming the file", bad, id, err)
		}
	}
}

// The record an earlier run of a state directory left in the registry (a
// crash, or a stop that left its NFS clients' locks) does not refuse a new
// run of that directory with other settings: it is the same server. It
// still refuses another server's.
func TestARestartWithOtherSettingsIsNotRefusedByItsOwnEarlierRun(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	a := c.open(t, 2*time.Second, "", func(cfg *Config) { cfg.StateDir = dir })
	id, err := a.NFSIdentity()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		srvs, err := a.Meta.Servers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(srvs, func(s meta.Server) bool { return s.NFS == fmt.Sprintf("%016x", id) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the registry record never named the NFS identity")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.Crash(); err != nil {
		t.Fatal(err)
	}
	open := func(dir string) error {
		cfg := Config{StateDir: dir, KV: c.db, Shared: true, LeaseTime: 2 * time.Second,
			Bucket: c.bucket, Endpoint: c.srv.Endpoint, AccessKey: c.srv.AccessKey, SecretKey: c.srv.SecretKey, Region: c.srv.Region,
			ExportDelay: time.Minute, PollInterval: -1, RevalidateTTL: -1, CheckpointInterval: -1}
		e, err := Open(ctx, cfg)
		if err == nil {
			e.Close()
		}
		return err
	}
	if err := open(t.TempDir()); !errors.Is(err, ErrSettings) {
		t.Fatalf("another server with another export delay beside the crashed run: %v; want ErrSettings", err)
	}
	if err := open(dir); err != nil {
		t.Fatalf("a new run of the crashed server's state directory with another export delay: %v", err)
	}
}

// A server's status does not list the record its own earlier run left in
// the registry as another live server.
func TestStatusDoesNotListTheServersOwnEarlierRun(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	a := c.open(t, 2*time.Second, "", func(cfg *Config) { cfg.StateDir = dir })
	if _, err := a.NFSIdentity(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		srvs, err := a.Meta.Servers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(srvs) == 1 && srvs[0].NFS != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the registry record never named the NFS identity")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.Crash(); err != nil {
		t.Fatal(err)
	}
	b := c.open(t, 2*time.Second, "", func(cfg *Config) { cfg.StateDir = dir })
	other := c.open(t, 2*time.Second, "")
	st, err := b.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range st.Servers {
		ids = append(ids, s.ID)
	}
	slices.Sort(ids)
	want := []string{b.ServerID(), other.ServerID()}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("status lists %v; want this run and the other server %v, not the crashed run %s", ids, want, a.ServerID())
	}
}

// waitNamed waits until the registry record of e names its NFS identity.
func waitNamed(t *testing.T, e *Engine, id uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		srvs, err := e.Meta.Servers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(srvs, func(s meta.Server) bool { return s.ID == e.ServerID() && s.NFS == fmt.Sprintf("%016x", id) }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the registry record never named the NFS identity")
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// A server started on a copy of another live server's state directory
// shares its NFS identity: it is refused at the start, with one line that
// names the identity file to delete, whether the copy was taken while the
// other ran (its run is then one the copy takes for its own earlier run,
// until its heartbeat moves) or before the other's latest start. A
// restart of the directory itself after a crash, while the crashed run's
// record is still fresh in the registry, is not refused; nor is the copy
// once its identity file is gone.
func TestACopyOfALiveServersStateDirectoryIsRefusedAndARestartIsNot(t *testing.T) {
	const lease = 2 * time.Second
	c := newCluster(t)
	dir := t.TempDir()
	a := c.open(t, lease, "", func(cfg *Config) { cfg.StateDir = dir })
	id, err := a.NFSIdentity()
	if err != nil {
		t.Fatal(err)
	}
	waitNamed(t, a, id)
	copied := t.TempDir()
	copyRegularFiles(t, dir, copied)
	ctx := context.Background()
	open := func(dir string) (*Engine, error) {
		cfg := Config{StateDir: dir, KV: c.db, Shared: true, LeaseTime: lease,
			Bucket: c.bucket, Endpoint: c.srv.Endpoint, AccessKey: c.srv.AccessKey, SecretKey: c.srv.SecretKey, Region: c.srv.Region,
			ExportDelay: time.Hour, PollInterval: -1, RevalidateTTL: -1, CheckpointInterval: -1}
		e, err := Open(ctx, cfg)
		if err == nil {
			t.Cleanup(func() { e.Close() })
			e.Start()
		}
		return e, err
	}
	refused := func(err error, dir string) bool {
		return errors.Is(err, ErrNFSIdentityCopied) && strings.Contains(err.Error(), filepath.Join(dir, nfsIdentityFile)) &&
			!strings.Contains(err.Error(), "\n")
	}

	// The copy, while a runs.
	if _, err := open(copied); !refused(err, copied) {
		t.Fatalf("a server on a copy of a live server's state directory: %v; want ErrNFSIdentityCopied naming %s", err,
			filepath.Join(copied, nfsIdentityFile))
	}

	// a crashes and its directory is started again at once: a restart.
	if err := a.Crash(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a2, err := open(dir)
	if err != nil {
		t.Fatalf("a restart of a crashed server's state directory: %v", err)
	}
	t.Logf("the restart waited %v to tell itself from a copy (lease %v)", time.Since(start).Round(time.Millisecond), lease)
	if id2, err := a2.NFSIdentity(); err != nil || id2 != id {
		t.Fatalf("identity after the restart %x, %v; want %x", id2, err, id)
	}
	waitNamed(t, a2, id)

	// The copy again: taken before a2 started, it does not know a2.
	start = time.Now()
	if _, err := open(copied); !refused(err, copied) {
		t.Fatalf("a server on a copy of the state directory beside the directory's new run: %v; want ErrNFSIdentityCopied", err)
	}
	if d := time.Since(start); d > lease/4 {
		t.Errorf("refusing a copy the live server is not an earlier run of took %v", d)
	}

	// Without its identity file the copy is a server of its own.
	if err := os.Remove(filepath.Join(copied, nfsIdentityFile)); err != nil {
		t.Fatal(err)
	}
	b, err := open(copied)
	if err != nil {
		t.Fatalf("the copy without its identity file: %v", err)
	}
	if idb, err := b.NFSIdentity(); err != nil || idb == id {
		t.Fatalf("the copy's new identity %x, %v; want one other than %x", idb, err, id)
	}
}

// copyRegularFiles copies the regular files and directories under src to
// dst, as a copy of a state directory would (the admin socket stays).
func copyRegularFiles(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Two copies of one state directory started so close together that
// neither start sees the other's record get past the start. They still
// honour each other's locks (a copy's run is no earlier run of the
// other), and each logs an error once it sees the other alive.
func TestTwoCopiesStartedTogetherHonourEachOthersLocksAndSaySo(t *testing.T) {
	const lease = 2 * time.Second
	c := newCluster(t)
	ctx := context.Background()
	open := func(dir string, logs *syncBuffer) *Engine {
		cfg := Config{StateDir: dir, KV: c.db, Shared: true, LeaseTime: lease,
			Bucket: c.bucket, Endpoint: c.srv.Endpoint, AccessKey: c.srv.AccessKey, SecretKey: c.srv.SecretKey, Region: c.srv.Region,
			ExportDelay: time.Hour, PollInterval: -1, RevalidateTTL: -1, CheckpointInterval: -1,
			Logger: slog.New(slog.NewTextHandler(logs, nil))}
		e, err := Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		if _, err := e.NFSIdentity(); err != nil {
			t.Fatal(err)
		}
		return e
	}
	dir, copied := t.TempDir(), t.TempDir()
	var logsA, logsB syncBuffer
	a := open(dir, &logsA)
	copyRegularFiles(t, dir, copied)
	b := open(copied, &logsB) // a has no record yet
	a.Start()
	b.Start()

	_, h, err := a.FS.Create(ctx, vfs.Root, meta.RootIno, "f", 0o644, syscall.O_RDWR|syscall.O_CREAT)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	ino := h.Ino()
	if err := a.FS.SetLock(ctx, ino, vfs.Lock{Start: 0, End: 99, Kind: vfs.LockWrite, Owner: vfs.LockOwner{ID: 1}}, false); err != nil {
		t.Fatal(err)
	}
	const line = "another live server of this file system has this server's NFS identity"
	deadline := time.Now().Add(5 * lease)
	for !strings.Contains(logsA.String(), line) || !strings.Contains(logsB.String(), line) {
		if time.Now().After(deadline) {
			t.Fatalf("the two copies did not report each other within %v:\na: %s\nb: %s", 5*lease, logsA.String(), logsB.String())
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	err = b.FS.SetLock(ctx, ino, vfs.Lock{Start: 50, End: 59, Kind: vfs.LockWrite, Owner: vfs.LockOwner{ID: 2}}, false)
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("a lock through the copy over the other's lock: %v; want EAGAIN", err)
	}
}
