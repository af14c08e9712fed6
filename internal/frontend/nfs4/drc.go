package nfs4

import (
	"context"
	"encoding/binary"
	"hash/maphash"
	"net"
	"net/netip"
	"sync"
	"time"
)

// The duplicate request cache of NFSv4.0. A 4.0 client that loses a
// connection (or a reply) sends the request again with the same xid; an
// operation that is not idempotent (CREATE, REMOVE, RENAME, LINK, a
// SETATTR that truncates) would then fail, or worse, do its work twice,
// where the seqid rules (seqid.go) do not cover it. So the reply to every
// 4.0 COMPOUND is kept for drcTTL, under the client's address, the xid,
// and a hash of the caller and the whole request; a request that matches
// one gets that reply without running again, and one that matches a
// request still running waits for its reply. 4.1 has no need of this: its
// session slots are exactly such a cache (session.go).
//
// Replies over drcMaxReply (READ data, large READDIR pages: idempotent
// all) are not kept; at most drcEntries are, the oldest going first.
const (
	drcTTL      = 2 * time.Minute
	drcMaxReply = 4 << 10
	drcEntries  = 4096
)

type drcKey struct {
	addr netip.Addr
	xid  uint32
	sum  uint64 // the caller's identity and the request's bytes
}

type drcEntry struct {
	done  chan struct{} // closed when reply is set
	reply []byte        // nil: not kept (too large, or the call failed)
	at    time.Time
}

type drc struct {
	seed    maphash.Seed
	mu      sync.Mutex
	entries map[drcKey]*drcEntry
	order   []drcKey // insertion order, for eviction
}

func newDRC() *drc { return &drc{seed: maphash.MakeSeed(), entries: map[drcKey]*drcEntry{}} }

// key names a call from addr: its xid, the caller and the arguments.
func (d *drc) key(addr net.Addr, xid uint32, who caller, args []byte) (drcKey, bool) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return drcKey{}, false
	}
	var h maphash.Hash
	h.SetSeed(d.seed)
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(who.principal)))
	h.Write(n[:])
	h.WriteString(who.principal)
	h.Write(args)
	return drcKey{addr: ap.Addr().Unmap(), xid: xid, sum: h.Sum64()}, true
}

// begin looks k up. With first true the caller runs the call and reports
// its reply to finish; otherwise e is the earlier call's entry, whose
// reply (once done is closed) answers this one.
func (d *drc) begin(k drcKey) (e *drcEntry, first bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.entries[k]; e != nil && time.Since(e.at) < drcTTL {
		return e, false
	}
	e = &drcEntry{done: make(chan struct{}), at: time.Now()}
	if len(d.order) >= drcEntries {
		old := d.order[0]
		d.order = d.order[1:]
		if x := d.entries[old]; x != nil {
			select {
			case <-x.done:
				delete(d.entries, old)
			default:
				d.order = append(d.order, old) // still running: keep it
			}
		}
	}
	d.entries[k] = e
	d.order = append(d.order, k)
	return e, true
}

// finish records the reply of the call that begin let run; nil (or one
// too large) is not kept.
func (d *drc) finish(k drcKey, e *drcEntry, reply []byte) {
	d.mu.Lock()
	if reply != nil && len(reply) <= drcMaxReply {
		e.reply = reply
	} else if d.entries[k] == e {
		delete(d.entries, k)
	}
	d.mu.Unlock()
	close(e.done)
}

// wait waits for an earlier call's reply; nil if it kept none.
func (e *drcEntry) wait(ctx context.Context) []byte {
	select {
	case <-e.done:
		return e.reply
	case <-ctx.Done():
		return nil
	}
}
