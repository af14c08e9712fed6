package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The NFS identity. An NFS server keeps its clients' records under an
// identity that must be the same at every start of the server and no
// other server's (package nfs4's identity.go): it lives in the state
// directory, in the file nfs-identity (16 hex digits), made once, from
// random bytes, and synced (the file and the directory) before it is
// used. The identity is also in this server's registry record
// (meta.Server.NFS), which is how the other NFS servers know it runs, and
// how a run of the state directory knows an earlier run's record.
//
// A state directory copied to another machine carries its identity with
// it: two servers started on copies would share their client records.
// Give each server a state directory of its own.

const nfsIdentityFile = "nfs-identity"

// NFSIdentity returns this server's NFS identity, making it on first use,
// and names it in the registry record. Call it before Start, so that the
// first record written has it.
func (e *Engine) NFSIdentity() (uint64, error) {
	id, err := loadOrMakeIdentity(filepath.Join(e.cfg.StateDir, nfsIdentityFile))
	if err != nil {
		return 0, fmt.Errorf("NFS identity: %w", err)
	}
	if e.leader != nil {
		e.leader.mu.Lock()
		e.leader.self.NFS = fmt.Sprintf("%016x", id)
		e.leader.mu.Unlock()
	}
	return id, nil
}

// readIdentity reads the identity at path; fs.ErrNotExist if none was
// made yet.
func readIdentity(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 16, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("%s holds %q, not an identity (16 hex digits): remove it to have a new one made, and the clients of this server lose what they could reclaim", path, strings.TrimSpace(string(b)))
	}
	return id, nil
}

// knownIdentity names, at the start, the identity the state directory
// has already, if any, in the registry record (before the first one is
// written): an earlier run of this directory that left its record behind
// (a crash, or a stop that left its clients' locks) is then known for
// what it is from the first look (earlierRun, checkSettings). A directory
// that never served NFS has none, and no such earlier run.
func (e *Engine) knownIdentity() {
	id, err := readIdentity(filepath.Join(e.cfg.StateDir, nfsIdentityFile))
	if err != nil {
		return // none yet, or a bad one: NFSIdentity reports it
	}
	e.leader.mu.Lock()
	e.leader.self.NFS = fmt.Sprintf("%016x", id)
	e.leader.mu.Unlock()
}

func loadOrMakeIdentity(path string) (uint64, error) {
	id, err := readIdentity(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return id, err
	}
	for id == 0 {
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return 0, err
		}
		id = binary.BigEndian.Uint64(r[:])
	}
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	_, err = fmt.Fprintf(f, "%016x\n", id)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
		return 0, err
	}
	return id, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// NFSServers implements nfs4.Registry: the NFS identities the server
// registry lists now. A server that stopped cleanly left it; one that
// died stays listed until some server has seen its heartbeat unchanged for
// twice the lease time (lookAtPeers).
func (e *Engine) NFSServers(ctx context.Context) (map[uint64]bool, error) {
	srvs, err := e.Meta.Servers(ctx)
	if err != nil {
		return nil, err
	}
	out := map[uint64]bool{}
	for _, s := range srvs {
		if id, err := strconv.ParseUint(s.NFS, 16, 64); err == nil && s.NFS != "" {
			out[id] = true
		}
	}
	return out, nil
}

// LeaseTime implements nfs4.Registry: how long a server's heartbeat may
// stay unchanged before the others take it for dead (Config.LeaseTime).
func (e *Engine) LeaseTime() time.Duration { return e.cfg.LeaseTime }

// Crash stops the engine as the death of its process would, for tests of
// what the other servers of a shared file system do then: its heartbeat
// and its sync lease stop without a release, and its registry record and
// its records of locks and opens stay, so the others take it for dead
// only after the lease time. What the front ends left in the store stays
// as they left it. The engine is closed when Crash returns.
func (e *Engine) Crash() error {
	if e.leader != nil {
		e.leader.killed.Store(true)
	}
	return e.Close()
}
