package nfs4

import (
	"container/list"
	"encoding/binary"
	"hash/fnv"
	"sync"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/vfs"
)

// READDIR cookies are a hash of the entry's name: they stay valid across
// restarts and while the directory changes. A listing resumes after the
// name behind a cookie; cookieCache remembers the name behind the cookie
// each reply ended with, so resuming is one lookup. A cookie it forgot
// (evicted, or from before a restart) costs one scan of the directory.

const (
	readdirBatch      = 256  // entries fetched from vfs at a time
	maxReaddirEntries = 4096 // entries in one reply
	rescanBatch       = 1024 // entries per step when a cookie is rescanned
)

func nameCookie(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	c := h.Sum64() &^ (1 << 63) // clients may store cookies as signed
	if c < 3 {
		c += 3 // 0 starts a listing; 1 and 2 are reserved
	}
	return c
}

type cookieKey struct {
	dir    vfs.Ino
	cookie uint64
}

type cookieEntry struct {
	key  cookieKey
	name string
}

// cookieCache is a bounded LRU from (directory, cookie) to entry name.
type cookieCache struct {
	mu  sync.Mutex
	cap int
	m   map[cookieKey]*list.Element
	lru list.List
}

func newCookieCache(n int) *cookieCache {
	return &cookieCache{cap: n, m: map[cookieKey]*list.Element{}}
}

func (c *cookieCache) put(dir vfs.Ino, cookie uint64, name string) {
	k := cookieKey{dir, cookie}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		e.Value.(*cookieEntry).name = name
		c.lru.MoveToFront(e)
		return
	}
	c.m[k] = c.lru.PushFront(&cookieEntry{k, name})
	for c.lru.Len() > c.cap {
		e := c.lru.Back()
		c.lru.Remove(e)
		delete(c.m, e.Value.(*cookieEntry).key)
	}
}

func (c *cookieCache) get(dir vfs.Ino, cookie uint64) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[cookieKey{dir, cookie}]
	if !ok {
		return "", false
	}
	c.lru.MoveToFront(e)
	return e.Value.(*cookieEntry).name, true
}

// cookieVerf is the READDIR cookie verifier: cookies never go stale, so it
// is a constant of the file system.
func (s *Server) cookieVerf() [8]byte {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], s.fsidHash|1)
	return v
}

// resumeAfter returns the name a listing resumes after for cookie.
func (q *request) resumeAfter(cookie uint64) (string, nfsv4.Nfsstat4) {
	if name, ok := q.s.cookies.get(q.cur, cookie); ok {
		return name, nfsv4.NFS4_OK
	}
	after := ""
	for {
		ents, err := q.s.fs.ReadDir(q.ctx, q.cred, q.cur, after, rescanBatch)
		if err != nil {
			return "", statusOf(err)
		}
		for _, e := range ents {
			if nameCookie(e.Name) == cookie {
				q.s.cookies.put(q.cur, cookie, e.Name)
				return e.Name, nfsv4.NFS4_OK
			}
		}
		if len(ents) < rescanBatch {
			// The entry is gone: the client starts over.
			return "", nfsv4.NFS4ERR_BAD_COOKIE
		}
		after = ents[len(ents)-1].Name
	}
}

func (q *request) readdir(a *nfsv4.Readdir4args) nfsv4.Readdir4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Readdir4res { return &nfsv4.Readdir4res_default{Status: st} }
	if _, st := q.curDir(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	verf := q.s.cookieVerf()
	switch {
	case a.Cookie == 0:
	case a.Cookie < 3:
		return fail(nfsv4.NFS4ERR_BAD_COOKIE)
	case a.Cookieverf != verf:
		return fail(nfsv4.NFS4ERR_NOT_SAME)
	}
	req := maskOf(a.AttrRequest)
	if req.asksWriteOnly() {
		return fail(nfsv4.NFS4ERR_INVAL)
	}
	if q.cur == pseudoRoot {
		return q.readdirPseudoRoot(a, req) // accesspoint.go
	}
	after := ""
	if a.Cookie != 0 {
		var st nfsv4.Nfsstat4
		if after, st = q.resumeAfter(a.Cookie); st != nfsv4.NFS4_OK {
			return fail(st)
		}
	}
	limit := int(min(a.Maxcount, maxReply-1024))
	if q.sess != nil {
		limit = min(limit, int(q.sess.fore.CaMaxresponsesize)-512)
	}
	const overhead = 8 + 4 + 4 // verifier, end of list, eof
	size := overhead
	var (
		head, tail *nfsv4.Entry4
		n          int
		lastName   string
		eof        bool
	)
fill:
	for {
		ents, err := q.s.fs.ReadDir(q.ctx, q.cred, q.cur, after, readdirBatch)
		if err != nil {
			return fail(statusOf(err))
		}
		// The batch's attributes in one read (one round trip on
		// PostgreSQL), not one read per entry.
		batch, err := q.s.fs.AttrsOf(q.ctx, ents)
		if err != nil {
			return fail(statusOf(err))
		}
		for _, e := range ents {
			after = e.Name
			at, ok := batch[e.Ino]
			var attrs nfsv4.Fattr4
			if !ok { // removed meanwhile
				if !req.has(nfsv4.FATTR4_RDATTR_ERROR) {
					continue
				}
				var b xdrBuf
				b.u32(uint32(statusOf(syscall.ENOENT)))
				var m attrMask
				m.set(nfsv4.FATTR4_RDATTR_ERROR)
				attrs = nfsv4.Fattr4{Attrmask: m.words(), AttrVals: b}
			} else {
				attrs = q.encodeAttrs(&at, req)
			}
			ent := &nfsv4.Entry4{Cookie: nameCookie(e.Name), Name: e.Name, Attrs: attrs}
			esize := 4 + 8 + 4 + (len(e.Name)+3)&^3 + 4 + 4*len(attrs.Attrmask) + 4 + (len(attrs.AttrVals)+3)&^3
			if size+esize > limit || n == maxReaddirEntries {
				if n == 0 {
					return fail(nfsv4.NFS4ERR_TOOSMALL)
				}
				break fill
			}
			size += esize
			n++
			lastName = e.Name
			if tail == nil {
				head = ent
			} else {
				tail.Nextentry = ent
			}
			tail = ent
		}
		if len(ents) < readdirBatch {
			eof = true
			break
		}
	}
	if tail != nil && !eof {
		q.s.cookies.put(q.cur, tail.Cookie, lastName)
	}
	return &nfsv4.Readdir4res_NFS4_OK{Resok4: nfsv4.Readdir4resok{Cookieverf: verf,
		Reply: nfsv4.Dirlist4{Entries: head, Eof: eof}}}
}
