package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"bucketfs/internal/meta"
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
