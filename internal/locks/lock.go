package locks

import (
	"fmt"
	"math"
	"syscall"
)

// Kind is what a lock request asks for.
type Kind uint8

const (
	// Read is a shared lock (F_RDLCK, LOCK_SH).
	Read Kind = iota + 1
	// Write is an exclusive lock (F_WRLCK, LOCK_EX).
	Write
	// Unlock releases a range (F_UNLCK, LOCK_UN).
	Unlock
)

func (k Kind) String() string {
	switch k {
	case Read:
		return "read"
	case Write:
		return "write"
	case Unlock:
		return "unlock"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// ToEOF as a Lock's End means the lock runs to the end of the file, however
// far the file grows.
const ToEOF = math.MaxUint64

// Owner identifies who holds a lock. Locks of the same Owner never conflict
// with each other. For FUSE, Client is 0 and ID is the kernel's lock owner
// (for flock, the open file description). For NFSv4, Client is the client id
// and ID the lock-owner within it.
type Owner struct {
	ID     uint64
	Client uint64
}

// Lock is a lock on the byte range [Start, End] of one inode, or a request
// for one.
type Lock struct {
	Start, End uint64 // End is inclusive; ToEOF means to the end of the file.
	Kind       Kind
	Owner      Owner
	Pid        uint32 // Reported by F_GETLK; plays no part in conflicts.
}

func (l Lock) String() string {
	end := fmt.Sprint(l.End)
	if l.End == ToEOF {
		end = "EOF"
	}
	return fmt.Sprintf("%v [%d,%s] owner %d/%d pid %d",
		l.Kind, l.Start, end, l.Owner.Client, l.Owner.ID, l.Pid)
}

// overlaps reports whether l and m share at least one byte.
func (l Lock) overlaps(m Lock) bool {
	return l.Start <= m.End && m.Start <= l.End
}

// touches reports whether l and m are next to each other without
// overlapping.
func (l Lock) touches(m Lock) bool {
	return (l.End != ToEOF && l.End+1 == m.Start) ||
		(m.End != ToEOF && m.End+1 == l.Start)
}

// conflicts reports whether held, a lock of another owner, stops req from
// being granted.
func (req Lock) conflicts(held Lock) bool {
	return held.Owner != req.Owner && held.overlaps(req) &&
		(held.Kind == Write || req.Kind == Write)
}

// Errors returned by the table. Match them with errors.Is, against these or
// against the errno each one wraps.
var (
	// ErrWouldBlock: a conflicting lock is held (EAGAIN).
	ErrWouldBlock = fmt.Errorf("locks: conflicting lock held: %w", syscall.EAGAIN)
	// ErrDeadlock: waiting would deadlock (EDEADLK).
	ErrDeadlock = fmt.Errorf("locks: wait would deadlock: %w", syscall.EDEADLK)
	// ErrInvalid: the request has an unknown kind or Start > End (EINVAL).
	ErrInvalid = fmt.Errorf("locks: invalid lock request: %w", syscall.EINVAL)
)

// valid reports whether l is a well-formed request.
func (l Lock) valid() bool {
	return l.Start <= l.End && l.Kind >= Read && l.Kind <= Unlock
}
