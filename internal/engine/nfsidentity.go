package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"bucketfs/internal/meta"
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
// it: two servers started on copies would share their client records,
// and each would take the other's registry record for an earlier run of
// its own and ignore its locks. On a shared store, a start tells a
// restart of its state directory from a copy of it by the directory's
// runs: the file nfs-runs lists the registry ids of the directory's runs
// whose records may still be in the registry, rewritten (and synced) at
// every start before this run's first record, with this run's id. A
// registry record that names this directory's identity is then
//
//   - one of the directory's runs (listed): an earlier run, dead since
//     this run holds the directory's lock, unless the directory is a
//     copy taken while that run ran. The start watches the record for
//     half a lease time, longer than a live server goes without a beat,
//     when its heartbeat is recent: a beat that moves is a live server,
//     and the start is refused;
//   - any other, with a heartbeat younger than two lease times (by this
//     server's clock, as checkSettings judges): the run of another
//     directory with this identity, a copy; the start is refused at
//     once. Older, it is a dead server's leftover and no earlier run.
//
// The refusal is ErrNFSIdentityCopied, one line that names the identity
// file to delete on the starting server. A directory without the runs
// file (made by an older version) takes every recent record with its
// identity for an earlier run and watches it. Only earlier runs are
// ignored by this run's locks and opens (earlierRun), so a copy that
// slipped through anyway (two copies started within one heartbeat of
// each other) still honours the other's locks; their client records
// remain mixed, and each logs an error once it sees the other's beat
// move (lookAtPeers).

const (
	nfsIdentityFile = "nfs-identity"
	nfsRunsFile     = "nfs-runs"
)

// ErrNFSIdentityCopied refuses a server whose state directory shares its
// NFS identity with another server of the file system (a copy).
var ErrNFSIdentityCopied = errors.New("another server of this file system has this state directory's NFS identity")

// NFSIdentity returns this server's NFS identity, making it on first use,
// and names it in the registry record. Call it before Start, so that the
// first record written has it.
func (e *Engine) NFSIdentity() (uint64, error) {
	id, err := loadOrMakeIdentity(filepath.Join(e.cfg.StateDir, nfsIdentityFile))
	if err != nil {
		return 0, fmt.Errorf("NFS identity: %w", err)
	}
	if e.leader != nil {
		l := e.leader
		l.mu.Lock()
		made := l.self.NFS == ""
		l.self.NFS = fmt.Sprintf("%016x", id)
		self := l.self.ID
		l.mu.Unlock()
		if made && !l.exclusive {
			// A new identity: no earlier run has it.
			runs := map[string]bool{self: true}
			if err := writeRuns(filepath.Join(e.cfg.StateDir, nfsRunsFile), runs); err != nil {
				return 0, fmt.Errorf("NFS identity: %w", err)
			}
			if err := e.Meta.NameNFSRun(context.Background(), id); err != nil {
				return 0, fmt.Errorf("NFS identity: %w", err)
			}
			l.mu.Lock()
			l.runs = runs
			l.mu.Unlock()
		}
	}
	return id, nil
}

// checkNFSIdentityCopy refuses, at the start on a shared store, a state
// directory whose NFS identity another server of the file system has (see
// the comment at the top), and records this run among the directory's
// runs. Call it after knownIdentity, before Start.
func (e *Engine) checkNFSIdentityCopy(ctx context.Context) error {
	l := e.leader
	l.mu.Lock()
	nfs, self := l.self.NFS, l.self.ID
	l.mu.Unlock()
	if nfs == "" {
		return nil // no identity yet: NFSIdentity makes a new one
	}
	identityPath := filepath.Join(e.cfg.StateDir, nfsIdentityFile)
	runsPath := filepath.Join(e.cfg.StateDir, nfsRunsFile)
	runs, err := readRuns(runsPath)
	if err != nil {
		return fmt.Errorf("NFS identity: %w", err)
	}
	srvs, err := e.Meta.Servers(ctx)
	if err != nil {
		return err
	}
	copied := func(s meta.Server) error {
		return fmt.Errorf("%w: server %s (host %s, pid %d) runs with it, so one of the two state directories is a copy of the other: delete %s on this server to have a new identity made (the NFS clients of this directory then have nothing to reclaim)",
			ErrNFSIdentityCopied, s.ID, s.Host, s.PID, identityPath)
	}
	kept := map[string]bool{self: true}
	var watch []meta.Server
	for _, s := range srvs {
		if s.ID == self || s.NFS != nfs {
			continue
		}
		recent := time.Since(s.Heartbeat) < 2*l.leaseTime
		switch {
		case runs != nil && !runs[s.ID]:
			if recent {
				return copied(s)
			}
		case recent:
			watch = append(watch, s)
			kept[s.ID] = true
		default:
			kept[s.ID] = true
		}
	}
	if len(watch) > 0 {
		window := l.leaseTime / 2
		e.log.Info("an earlier run of this state directory is still in the server registry: watching its heartbeat to tell a restart from a copy of the directory",
			"runs", len(watch), "for", window)
		t := time.NewTicker(max(window/16, time.Millisecond))
		defer t.Stop()
		for end := time.Now().Add(window); time.Now().Before(end); {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
			now, err := e.Meta.Servers(ctx)
			if err != nil {
				return err
			}
			for _, s := range now {
				for _, w := range watch {
					if s.ID == w.ID && s.Beat != w.Beat {
						return copied(s)
					}
				}
			}
		}
	}
	if err := writeRuns(runsPath, kept); err != nil {
		return fmt.Errorf("NFS identity: %w", err)
	}
	id, err := strconv.ParseUint(nfs, 16, 64)
	if err != nil {
		return err
	}
	if err := e.Meta.NameNFSRun(ctx, id); err != nil {
		return fmt.Errorf("NFS identity: %w", err)
	}
	l.mu.Lock()
	l.runs = kept
	l.mu.Unlock()
	return nil
}

// readRuns reads the runs file at path: nil if there is none.
func readRuns(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	runs := map[string]bool{}
	for _, id := range strings.Fields(string(b)) {
		runs[id] = true
	}
	return runs, nil
}

// writeRuns replaces the runs file at path with runs, durably.
func writeRuns(path string, runs map[string]bool) error {
	var b strings.Builder
	for _, id := range slices.Sorted(maps.Keys(runs)) {
		b.WriteString(id + "\n")
	}
	return writeSynced(path, []byte(b.String()))
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
	if err := writeSynced(path, fmt.Appendf(nil, "%016x\n", id)); err != nil {
		return 0, err
	}
	return id, nil
}

// writeSynced replaces the file at path with b: written to a temporary
// file, synced, renamed over path, and the directory synced.
func writeSynced(path string, b []byte) error {
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
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
	}
	return err
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
