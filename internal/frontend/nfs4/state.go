package nfs4

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/locks"
	"bucketfs/internal/vfs"
)

// stateTable is all protocol state of a server: clients, sessions, open
// and lock states. One mutex guards it; it is never held across a vfs call.
type stateTable struct {
	mu        sync.Mutex
	boot      uint32
	next      uint64
	nextState uint32 // last stateid number handed out (newOther)

	clients     map[uint64]*client
	confirmed   map[string]*client // by owner key (clientKey)
	unconfirmed map[string]*client
	sessions    map[[16]byte]*session
	states      map[[12]byte]any // *openState or *lockState
	opensByIno  map[vfs.Ino][]*openState
	lockOwners  map[uint64]*lockOwner // by locks.Owner.ID

	// closed maps the stateid each 4.0 open-owner's last CLOSE ended to
	// the owner, so that a retransmission of that CLOSE is answered from
	// the owner's reply cache (seqid.go).
	closed map[[12]byte]*openOwner

	// gone holds the low 32 bits of the ids of clients whose lease
	// expired or whose reboot replaced them, with the time, so that their
	// stateids are NFS4ERR_EXPIRED rather than NFS4ERR_BAD_STATEID. The
	// reaper forgets entries after goneMemory.
	gone map[uint32]time.Time

	grace graceState // grace.go
}

// goneMemory is how long the stateids of an expired client are told
// apart from stateids never issued.
const goneMemory = time.Hour

func newStateTable(boot uint32) *stateTable {
	return &stateTable{boot: boot, clients: map[uint64]*client{},
		confirmed: map[string]*client{}, unconfirmed: map[string]*client{},
		sessions: map[[16]byte]*session{}, states: map[[12]byte]any{},
		opensByIno: map[vfs.Ino][]*openState{}, lockOwners: map[uint64]*lockOwner{},
		closed: map[[12]byte]*openOwner{}, gone: map[uint32]time.Time{},
		grace: graceState{reclaimable: map[string]string{}, completed: map[string]bool{}}}
}

// client is one client instance: an EXCHANGE_ID (4.1) or SETCLIENTID
// (4.0) record.
type client struct {
	id          uint64
	key         string // minor-version class and owner id
	verifier    [8]byte
	minor41     bool
	confirmed   bool
	principal   string  // who made the record (caller.principal)
	confirmVerf [8]byte // 4.0: SETCLIENTID_CONFIRM's verifier
	lastRenew   time.Time
	// recorded: the client's record is in stable storage (grace.go), so
	// it may be granted opens and locks; recordedRenew is the renewal
	// time the record holds (records.go).
	recorded      bool
	recordedRenew time.Time
	// granting counts OPENs of the client between recordClient and the
	// end of their grant (granted): its record must stay meanwhile.
	granting int
	// reclaimDone: 4.1 RECLAIM_COMPLETE was sent.
	reclaimDone bool
	// reclaimExplained: a refused reclaim of the client was looked up
	// among the other servers' records (explainRefusedReclaim), which is
	// done once.
	reclaimExplained bool

	// 4.1: the csa_sequence the next CREATE_SESSION carries, and the
	// reply to the last one, for a retransmission.
	csSeq    uint32
	csLast   *nfsv4.CreateSession4resok
	sessions map[[16]byte]*session

	openOwners map[string]*openOwner
	lockOwners map[string]*lockOwner
	opens      map[openKey]*openState
}

type openKey struct {
	owner string
	ino   vfs.Ino
}

// openOwner is a client's open-owner. 4.0 orders its OPEN, OPEN_CONFIRM,
// OPEN_DOWNGRADE and CLOSE requests (and LOCKs that make a lock-owner's
// first lock state) by seqid.
type openOwner struct {
	client    *client
	key       string
	seq       seqOwner
	confirmed bool

	// 4.0: the stateid the owner's last CLOSE ended (a key of
	// stateTable.closed), if any.
	lastClosed    [12]byte
	hasLastClosed bool
}

// openState is one open-owner's open of one file: the share access and
// deny it holds and the vfs handle its reads and writes go through.
type openState struct {
	other  [12]byte
	seq    uint32
	owner  *openOwner
	ino    vfs.Ino
	access uint32 // OPEN4_SHARE_ACCESS_* bits held
	deny   uint32 // OPEN4_SHARE_DENY_* bits held
	// opened has bit 1<<v for each share_access value v (READ, WRITE,
	// BOTH) an OPEN of this state asked for, and denied the same for
	// share_deny values: OPEN_DOWNGRADE may only go to such values (RFC
	// 7530 16.19.4, RFC 8881 18.18.3).
	opened, denied uint8
	h              *vfs.Handle
	locks          map[*lockOwner]*lockState

	// refs counts requests using h; a removed (dead) state's handles are
	// released when the last of them finishes. retired holds handles an
	// upgrade replaced.
	refs    int
	dead    bool
	retired []*vfs.Handle
}

// lockOwner is a client's lock-owner; id is its locks.Owner.ID. 4.0
// orders its LOCK and LOCKU requests by seqid.
type lockOwner struct {
	client *client
	key    string
	id     uint64
	seq    seqOwner
}

// lockState is one lock-owner's locks on one file, derived from an open.
type lockState struct {
	other [12]byte
	seq   uint32
	owner *lockOwner
	open  *openState
	ino   vfs.Ino
}

func (l *lockOwner) vfsOwner() locks.Owner { return locks.Owner{ID: l.id, Client: l.client.id} }

// newID returns a fresh 64-bit id of this server instance: the boot prefix
// and a counter. Requires t.mu.
func (t *stateTable) newID() uint64 {
	t.next++
	return uint64(t.boot)<<32 | t.next&0xffffffff
}

// newOther returns a fresh stateid "other" field for a state of client
// cl: the boot prefix (a stateid of an earlier instance is stale), the low
// 32 bits of the client id (one of an expired client is expired) and a
// stateid number. The numbers wrap after 2^32 stateids of one instance;
// one still in use is skipped, so two live states never share an other.
// Requires t.mu.
func (t *stateTable) newOther(cl *client) [12]byte {
	var o [12]byte
	binary.BigEndian.PutUint32(o[:], t.boot)
	binary.BigEndian.PutUint32(o[4:], uint32(cl.id))
	for {
		t.nextState++
		binary.BigEndian.PutUint32(o[8:], t.nextState)
		if _, used := t.states[o]; !used {
			return o
		}
	}
}

// stateidClient is the low 32 bits of the id of the client a stateid of
// this instance was issued to.
func stateidClient(other [12]byte) uint32 { return binary.BigEndian.Uint32(other[4:]) }

func sid(other [12]byte, seq uint32) nfsv4.Stateid4 { return nfsv4.Stateid4{Seqid: seq, Other: other} }

// bumpSeq advances a stateid's seqid, skipping 0 (which 4.1 reserves).
func bumpSeq(s uint32) uint32 {
	s++
	if s == 0 {
		s = 1
	}
	return s
}

// removeOpen drops an open state and its lock states from the tables and
// returns them so the caller can release the handle and locks outside the
// mutex. Requires t.mu.
func (t *stateTable) removeOpen(o *openState) []*lockState {
	o.dead = true
	delete(t.states, o.other)
	delete(o.owner.client.opens, openKey{o.owner.key, o.ino})
	list := t.opensByIno[o.ino]
	for i, x := range list {
		if x == o {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(t.opensByIno, o.ino)
	} else {
		t.opensByIno[o.ino] = list
	}
	var ls []*lockState
	for _, l := range o.locks {
		delete(t.states, l.other)
		ls = append(ls, l)
	}
	o.locks = nil
	return ls
}

// removeClient drops a client and everything it holds from the tables and
// returns its open states, whose handles the caller releases. Requires t.mu.
func (t *stateTable) removeClient(cl *client) []*openState {
	delete(t.clients, cl.id)
	if cl.confirmed {
		t.gone[uint32(cl.id)] = time.Now()
	}
	if t.confirmed[cl.key] == cl {
		delete(t.confirmed, cl.key)
	}
	if t.unconfirmed[cl.key] == cl {
		delete(t.unconfirmed, cl.key)
	}
	for id := range cl.sessions {
		delete(t.sessions, id)
	}
	cl.sessions = nil
	var opens []*openState
	for _, o := range cl.opens {
		t.removeOpen(o)
		opens = append(opens, o)
	}
	for _, lo := range cl.lockOwners {
		delete(t.lockOwners, lo.id)
	}
	for _, oo := range cl.openOwners {
		if oo.hasLastClosed {
			delete(t.closed, oo.lastClosed)
		}
	}
	return opens
}

// confirm makes cl, if not yet confirmed, its owner's confirmed client. A
// confirmed client of the same owner that cl replaces (the client
// rebooted) is dropped; its id and open states are returned for
// releaseClient outside the mutex, id 0 when there is none. Requires t.mu.
func (t *stateTable) confirm(cl *client) (oldID uint64, old []*openState) {
	if cl.confirmed {
		return 0, nil
	}
	cl.confirmed = true
	delete(t.unconfirmed, cl.key)
	if prev := t.confirmed[cl.key]; prev != nil && prev != cl {
		oldID = prev.id
		old = t.removeClient(prev)
	}
	t.confirmed[cl.key] = cl
	return oldID, old
}

func (t *stateTable) allClients() []*client {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*client, 0, len(t.clients))
	for _, cl := range t.clients {
		out = append(out, cl)
	}
	return out
}

// expire drops a client's state and releases its open files and locks.
func (s *Server) expire(cl *client) {
	s.state.mu.Lock()
	if s.state.clients[cl.id] != cl {
		s.state.mu.Unlock()
		return
	}
	opens := s.state.removeClient(cl)
	s.state.mu.Unlock()
	s.forgetClient(cl)
	s.releaseClient(cl.id, opens)
}

// releaseClient releases the open files and locks of client id, already
// removed from the tables (removeClient) with open states opens.
func (s *Server) releaseClient(id uint64, opens []*openState) {
	s.releaseOpens(opens)
	s.fs.ReleaseClientLocks(id)
}

// releaseOpens closes the handles of open states already removed from the
// tables that no request is using; the last request using one closes it
// otherwise (unref).
func (s *Server) releaseOpens(opens []*openState) {
	var hs []*vfs.Handle
	inos := make([]vfs.Ino, 0, len(opens))
	s.state.mu.Lock()
	for _, o := range opens {
		hs = append(hs, o.takeHandles()...)
		inos = append(inos, o.ino)
	}
	s.state.mu.Unlock()
	s.republishShares(inos...)
	for _, h := range hs {
		h.Release(context.Background())
	}
}

// takeHandles returns the handles of o that may be released now: the
// retired ones once no request uses them, and h too once o is dead.
// Requires the table mutex.
func (o *openState) takeHandles() []*vfs.Handle {
	if o.refs > 0 {
		return nil
	}
	hs := o.retired
	o.retired = nil
	if o.dead && o.h != nil {
		hs = append(hs, o.h)
		o.h = nil
	}
	return hs
}

// unref ends a request's use of o's handle.
func (s *Server) unref(o *openState) {
	s.state.mu.Lock()
	o.refs--
	hs := o.takeHandles()
	s.state.mu.Unlock()
	for _, h := range hs {
		h.Release(context.Background())
	}
}

// reap expires clients whose lease ran out and keeps the client records
// up to date (records.go).
func (s *Server) reap() {
	defer s.reaperWG.Done()
	tick := time.NewTicker(s.reapTick())
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-tick.C:
			for _, cl := range s.expiredClients(now) {
				s.log.Info("client lease expired; releasing its opens and locks", "client", cl.id)
				s.expire(cl)
			}
			s.pruneRecords()
			s.keepRecords()
			s.forgetGone(now)
			s.forgetGoneServers(context.Background(), now)
		}
	}
}

// forgetGone drops the expired clients remembered longer than goneMemory.
func (s *Server) forgetGone(now time.Time) {
	s.state.mu.Lock()
	defer s.state.mu.Unlock()
	for id, at := range s.state.gone {
		if now.Sub(at) > goneMemory {
			delete(s.state.gone, id)
		}
	}
}

// expiredClients lists clients whose lease ran out and that have no
// request in progress.
func (s *Server) expiredClients(now time.Time) []*client {
	t := s.state
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*client
	for _, cl := range t.clients {
		if now.Sub(cl.lastRenew) <= s.expireAfter() || cl.busy() {
			continue
		}
		out = append(out, cl)
	}
	return out
}

// busy reports whether a request holds one of the client's slots.
// Requires the table mutex.
func (cl *client) busy() bool {
	for _, se := range cl.sessions {
		for i := range se.slots {
			if se.slots[i].busy {
				return true
			}
		}
	}
	return false
}

// holdsState reports whether the client holds state that another
// principal's EXCHANGE_ID or SETCLIENTID may not take from it: an open
// (its locks live under its opens) or, in 4.1, a session. Requires the
// table mutex.
func (cl *client) holdsState() bool { return len(cl.opens) > 0 || len(cl.sessions) > 0 }

// renew extends a client's lease. Requires the table mutex.
func (cl *client) renew() { cl.lastRenew = time.Now() }
