package fuse

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"bucketfs/internal/vfs"
)

// groupsTTL is how long the groups read for a pid are used: a busy
// process makes many requests, and /proc is read once a second for them
// all. The accepted risk: within it, a process that changed its groups, or
// another process of the same uid and gid that got a pid just freed, is
// judged by the groups read before.
const groupsTTL = time.Second

// maxCallers bounds the cache; when it is full, the expired entries go, and
// if none has expired, all of them.
const maxCallers = 1024

// callers knows the supplementary groups of the processes that make
// requests. FUSE gives a request the caller's pid, uid and gid (the fs ids)
// but not its supplementary groups, which vfs needs for the group bits and
// for chown to a group the caller is in; callers reads them from the
// Groups line of /proc/PID/status and caches them by pid for groupsTTL.
//
// The kernel checks permissions itself too (default_permissions), with the
// process's real groups; what depends on ours is the engine's own checks
// (open, create, lookup, ...) and its chown and chmod rules.
//
// The groups are used only when the file's fs uid and fs gid are the
// request's: a process that changed identity since, or another process
// that got the pid, falls back to the primary gid alone, as does a pid
// whose file cannot be read (the process is gone; pid 0, a request the
// kernel makes on its own or from a pid namespace the mount cannot see).
//
// It is safe for concurrent use.
type callers struct {
	read func(pid uint32) ([]byte, error) // the pid's /proc status file
	now  func() time.Time

	mu   sync.Mutex
	pids map[uint32]caller
}

type caller struct {
	uid, gid uint32
	groups   []uint32
	read     time.Time
}

func newCallers() *callers {
	return &callers{read: readProcStatus, now: time.Now, pids: map[uint32]caller{}}
}

func readProcStatus(pid uint32) ([]byte, error) {
	return os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
}

// cred is the identity the request in h runs as, with the caller's
// supplementary groups.
func (cs *callers) cred(h *fuse.InHeader) vfs.Cred {
	return vfs.Cred{Uid: h.Uid, Gid: h.Gid, Groups: cs.groups(h.Pid, h.Uid, h.Gid)}
}

// groups returns the supplementary groups of pid if it runs as uid and
// gid, or nil.
func (cs *callers) groups(pid, uid, gid uint32) []uint32 {
	if pid == 0 {
		return nil
	}
	now := cs.now()
	cs.mu.Lock()
	c, ok := cs.pids[pid]
	cs.mu.Unlock()
	if ok && c.uid == uid && c.gid == gid && now.Sub(c.read) < groupsTTL {
		return c.groups
	}
	b, err := cs.read(pid)
	if err != nil {
		return nil
	}
	st, ok := parseStatus(b)
	if !ok || st.uid != uid || st.gid != gid {
		return nil
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.pids) >= maxCallers {
		for p, c := range cs.pids {
			if now.Sub(c.read) >= groupsTTL {
				delete(cs.pids, p)
			}
		}
		if len(cs.pids) >= maxCallers {
			clear(cs.pids)
		}
	}
	cs.pids[pid] = caller{uid: uid, gid: gid, groups: st.groups, read: now}
	return st.groups
}

// procStatus is what a /proc/PID/status file says of a process's identity.
type procStatus struct {
	uid, gid uint32 // the fs uid and gid, which FUSE requests carry
	groups   []uint32
}

// parseStatus reads the Uid, Gid and Groups lines of a /proc/PID/status
// file. Anything it does not understand takes groups away, never adds
// them: a line not ended by a newline is not read; a Uid or Gid line
// without four ids, a repeated line, or a group that is not a 32-bit
// number makes the whole file unusable (ok false).
func parseStatus(b []byte) (st procStatus, ok bool) {
	var haveUid, haveGid, haveGroups bool
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		line := b[:i]
		b = b[i+1:]
		key, value, found := bytes.Cut(line, []byte(":"))
		if !found {
			continue
		}
		var have *bool
		switch string(key) {
		case "Uid":
			have = &haveUid
		case "Gid":
			have = &haveGid
		case "Groups":
			have = &haveGroups
		default:
			continue
		}
		if *have {
			return procStatus{}, false
		}
		*have = true
		ids, ok := parseIDs(value)
		if !ok {
			return procStatus{}, false
		}
		switch string(key) {
		case "Uid", "Gid":
			// real, effective, saved and fs ids
			if len(ids) != 4 {
				return procStatus{}, false
			}
			if string(key) == "Uid" {
				st.uid = ids[3]
			} else {
				st.gid = ids[3]
			}
		case "Groups":
			st.groups = ids
		}
	}
	if !haveUid || !haveGid || !haveGroups {
		return procStatus{}, false
	}
	return st, true
}

// maxGroups is the kernel's NGROUPS_MAX.
const maxGroups = 65536

// parseIDs reads a list of ids separated by blanks.
func parseIDs(s []byte) ([]uint32, bool) {
	fields := bytes.Fields(s)
	if len(fields) > maxGroups {
		return nil, false
	}
	var ids []uint32
	for _, f := range fields {
		n, err := strconv.ParseUint(string(f), 10, 32)
		if err != nil {
			return nil, false
		}
		ids = append(ids, uint32(n))
	}
	return ids, true
}
