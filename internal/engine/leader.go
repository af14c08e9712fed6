package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	gosync "sync"
	"sync/atomic"
	"time"

	"bucketfs/internal/meta"
	bsync "bucketfs/internal/sync"
)

// Several servers, one file system. Every engine registers itself in the
// kv (meta.Server) and renews its heartbeat; the one holding the sync
// lease (meta.SyncLease) does the work that must happen once: the
// exporter's passes, the importer's polls and event workers (and the
// moves to lost+found they make), the flushes other servers ask for, and
// the abort of multipart uploads a crash left. Every other server serves
// reads and writes, which queue exports in the shared kv, and hands its
// flushes and the keys its webhook is told of to the leader. Only the leader's work runs under its fence
// (meta.WithFence), so a leader that lost the lease without noticing
// records nothing (see meta's lease.go for the argument).
//
// Failover: the lease is renewed every LeaseTime/4. A server that sees the
// lease record unchanged for LeaseTime, on its own clock, takes it over;
// it looks again exactly when that time has passed. So a leader that dies
// is replaced at most LeaseTime plus one renewal interval after its last
// renewal (12.5 s with the default 10 s); one that stops cleanly releases
// the lease and is replaced at the next look of another server (at most
// one renewal interval).

// leadership is an engine's part in the registry and the sync lease.
type leadership struct {
	e *Engine
	// exclusive: nobody else can use this kv (the engine's own Pebble
	// store, under its locked state directory), so a holder the record
	// names is a run of this state directory that died: taken over at
	// once.
	exclusive bool
	leaseTime time.Duration

	mu    gosync.Mutex
	self  meta.Server
	term  *leaderTerm // nil while not the leader
	seen  meta.Lease  // the lease record as last seen
	since time.Time   // when it was first seen so (monotonic)
	peers map[string]observed
	// runs are the registry ids of this state directory's runs whose
	// records may still be in the registry, this one's included
	// (nfsidentity.go); nil before the start has read them, or when the
	// directory has no NFS identity.
	runs map[string]bool
	// twins are the live servers with this one's NFS identity that are
	// none of its runs, each reported once (lookAtPeers).
	twins map[string]bool
	// asked holds the servers Alive was asked about that this one has not
	// seen in the registry yet, with when it was first asked; gone, those
	// it knows have left it (see Alive).
	asked, gone map[string]time.Time

	// killed stops the renewals without a release, as if the process had
	// died (a test hook: one process stands for two servers; a pause is
	// a held request plus a fence taken before, as in the tests).
	killed atomic.Bool
}

// observed is another server's record as this one saw it.
type observed struct {
	srv   meta.Server
	since time.Time // when its Beat was first seen (monotonic)
}

// leaderTerm is one stretch of holding the lease.
type leaderTerm struct {
	fence meta.Fence
	ctx   context.Context
	// validUntil is holdFor after the start of the last renewal that
	// succeeded: then the holder stops, even if it cannot reach the kv
	// to learn whether another server took over.
	validUntil time.Time
	stop       context.CancelFunc
	done       gosync.WaitGroup
}

func newLeadership(e *Engine, exclusive bool) (*leadership, error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	l := &leadership{e: e, exclusive: exclusive, leaseTime: e.cfg.LeaseTime, peers: map[string]observed{},
		asked: map[string]time.Time{}, gone: map[string]time.Time{}, twins: map[string]bool{}}
	l.self = meta.Server{ID: hex.EncodeToString(id[:]), Host: host, PID: os.Getpid(), Started: time.Now(),
		Addrs: map[string]string{}, ReadOnly: e.cfg.ReadOnly, Settings: sharedSettings(e.cfg)}
	if e.metricsAddr != "" {
		l.self.Addrs["metrics"] = e.metricsAddr
	}
	return l, nil
}

// renewEvery is the interval of heartbeats and renewals.
func (l *leadership) renewEvery() time.Duration { return l.leaseTime / 4 }

// holdFor is how long after the start of its last renewal the holder
// counts itself the leader: nine tenths of the lease time, leaving a
// tenth for the difference in rate of two servers' clocks and for
// scheduling. A taker waits the whole lease time after it saw that
// renewal, which was after the renewal started.
func (l *leadership) holdFor() time.Duration { return l.leaseTime * 9 / 10 }

// run keeps the heartbeat and the lease until ctx ends, then ends the
// term, releases the lease and removes the registry record. Killed (the
// test hook), it just stops: no release, no record removed, and the term
// runs on until its watchdog stops it (watch) or Close does.
func (l *leadership) run(ctx context.Context) {
	defer func() {
		if l.killed.Load() {
			return
		}
		l.endTerm()
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := l.e.Meta.ReleaseLease(rctx, meta.SyncLease, l.self.ID); err != nil {
			l.e.log.Warn("release the sync lease; another server takes it over after the lease time", "err", err)
		}
		// Locks this server's clients still hold at a clean stop (an NFS
		// server keeps them for its clients to reclaim at its restart)
		// hold for the other servers as after a crash: the registry
		// record is left to run out, so they honour the locks for the
		// lease time, and a restart of this state directory takes them
		// over (earlierRun).
		if held, err := l.e.Meta.HoldsLocks(rctx, l.selfID()); err != nil || held {
			l.e.log.Info("clients of this server hold locks: its registry record is left to run out, so the other servers honour them for the lease time", "lease", l.leaseTime)
			return
		}
		if err := l.e.Meta.RemoveServer(rctx, l.self.ID, 0); err != nil {
			l.e.log.Warn("remove this server from the registry", "err", err)
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if l.killed.Load() {
			return
		}
		t.Reset(l.round(ctx))
	}
}

// round renews the heartbeat, looks at the other servers and takes or
// renews the lease, starting or ending the leader's term. It returns when
// to look again.
func (l *leadership) round(ctx context.Context) time.Duration {
	every := l.renewEvery()
	rctx, cancel := context.WithTimeout(ctx, every)
	defer cancel()
	l.mu.Lock()
	self := l.self
	self.Addrs = maps.Clone(self.Addrs)
	l.mu.Unlock()
	if _, err := l.e.Meta.Heartbeat(rctx, self); err != nil && ctx.Err() == nil {
		l.e.log.Warn("server registry", "err", err)
	}
	l.lookAtPeers(rctx)
	if l.e.cfg.ReadOnly && !l.exclusive && l.writablePeer() {
		// A writable server exports and imports; a read-only one would
		// only import, leaving the export queue to wait.
		if l.current() != nil {
			l.endTerm()
			if err := l.e.Meta.ReleaseLease(rctx, meta.SyncLease, self.ID); err != nil && ctx.Err() == nil {
				l.e.log.Warn("release the sync lease to a writable server", "err", err)
			}
		}
		return every
	}

	start := time.Now()
	cur, held, err := l.e.Meta.TryLease(rctx, meta.SyncLease, self.ID, l.leaseTime, l.expired)
	if err != nil {
		if ctx.Err() == nil {
			l.e.log.Warn("sync lease", "err", err)
		}
		if l.current() == nil {
			l.endTerm() // one its watchdog stopped, if any
		}
		return every
	}
	l.mu.Lock()
	if !cur.Same(l.seen) {
		l.seen, l.since = cur, time.Now()
	}
	term := l.term
	l.mu.Unlock()
	if held {
		if term != nil && term.fence.Token == cur.Token && term.ctx.Err() == nil {
			l.mu.Lock()
			term.validUntil = start.Add(l.holdFor())
			l.mu.Unlock()
			return every
		}
		l.endTerm()
		l.startTerm(ctx, cur, start.Add(l.holdFor()))
		return every
	}
	if term != nil {
		l.e.log.Info("the sync lease went to another server: this one stops exporting and importing",
			"holder", cur.Holder, "token", cur.Token)
		l.endTerm()
	}
	if cur.Holder == "" {
		return every
	}
	// Look again when the holder's record would have stayed unchanged
	// for the lease time.
	l.mu.Lock()
	left := l.leaseTime - time.Since(l.since)
	l.mu.Unlock()
	return min(every, max(left, time.Millisecond))
}

// expired tells whether the lease record cur has stayed as it is for the
// lease time, as this server has seen it (called inside TryLease's
// transaction).
func (l *leadership) expired(cur meta.Lease) bool {
	if l.exclusive {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return cur.Same(l.seen) && !l.since.IsZero() && time.Since(l.since) >= l.leaseTime
}

// lookAtPeers notes the other servers' beats and removes the records of
// those seen unchanged for twice the lease time (dead without a clean
// stop).
func (l *leadership) lookAtPeers(ctx context.Context) {
	start := time.Now()
	srvs, err := l.e.Meta.Servers(ctx)
	if err != nil {
		return
	}
	now := time.Now()
	l.mu.Lock()
	seen := map[string]bool{}
	defer l.noteGone(seen, start, now)
	var dead, twins []meta.Server
	for _, s := range srvs {
		seen[s.ID] = true
		if s.ID == l.self.ID {
			continue
		}
		o, ok := l.peers[s.ID]
		if !ok || o.srv.Beat != s.Beat {
			if ok && s.NFS != "" && s.NFS == l.self.NFS && l.runs != nil && !l.runs[s.ID] && !l.twins[s.ID] {
				// Its beat moves: a live server with this one's NFS
				// identity, from a copy of the state directory that
				// started too close to this one for either start to
				// see the other (nfsidentity.go).
				l.twins[s.ID] = true
				twins = append(twins, s)
			}
			l.peers[s.ID] = observed{srv: s, since: now}
			continue
		}
		if now.Sub(o.since) >= 2*l.leaseTime {
			dead = append(dead, s)
		}
	}
	for id := range l.peers {
		if !seen[id] {
			delete(l.peers, id)
			l.gone[id] = now
		}
	}
	l.mu.Unlock()
	for _, s := range twins {
		l.e.log.Error("another live server of this file system has this server's NFS identity: their state directories are copies of one; their locks still bind each other, but their NFS clients' records are mixed: stop one and delete the nfs-identity file in its state directory",
			"server", s.ID, "host", s.Host, "pid", s.PID, "state_dir", l.e.cfg.StateDir)
	}
	for _, s := range dead {
		if err := l.e.Meta.RemoveServer(ctx, s.ID, s.Beat); err == nil {
			l.e.log.Info("removed a server that stopped renewing its heartbeat from the registry", "server", s.ID, "host", s.Host, "pid", s.PID)
		}
	}
}

// alive tells whether server s counts as alive: this server, or one whose
// beat this server has seen change within the lease time (or has not
// watched that long yet).
func (l *leadership) alive(s meta.Server) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.ID == l.self.ID {
		return true
	}
	o, ok := l.peers[s.ID]
	return !ok || o.srv.Beat != s.Beat || time.Since(o.since) < l.leaseTime
}

// announce records an address this server serves (what: "nfs",
// "metrics") in its registry record, from the next heartbeat on.
func (l *leadership) announce(what, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.self.Addrs[what] = addr
}

// current returns the running term, if any and not past its time.
func (l *leadership) current() *leaderTerm {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.term == nil || l.term.ctx.Err() != nil {
		return nil
	}
	return l.term
}

// fenced returns ctx under this server's fence, if it holds the lease.
func (l *leadership) fenced(ctx context.Context) (context.Context, bool) {
	term := l.current()
	if term == nil {
		return ctx, false
	}
	return meta.WithFence(ctx, term.fence), true
}

// startTerm runs the leader's work under the fence of lease record cur.
func (l *leadership) startTerm(parent context.Context, cur meta.Lease, validUntil time.Time) {
	e := l.e
	fence := meta.Fence{Lease: meta.SyncLease, Holder: cur.Holder, Token: cur.Token}
	ctx, cancel := context.WithCancel(meta.WithFence(parent, fence))
	term := &leaderTerm{fence: fence, ctx: ctx, stop: cancel, validUntil: validUntil}
	l.mu.Lock()
	l.term = term
	l.mu.Unlock()
	e.log.Info("this server holds the sync lease: it exports and imports", "server", cur.Holder, "token", cur.Token)
	run := func(fn func()) {
		term.done.Add(1)
		go func() {
			defer term.done.Done()
			fn()
		}()
	}
	if !l.exclusive && !e.cfg.ReadOnly {
		// The multipart uploads a leader that died left open: no
		// other server starts any while this one holds the lease (a
		// stale leader's cannot complete: its record fails).
		run(func() { bsync.AbortOrphanedUploads(ctx, e.Meta, e.Bucket, e.log) })
	}
	run(func() { l.watch(term) })
	run(func() { e.Importer.RunNotifications(ctx, 4) })
	if e.cfg.PollInterval > 0 {
		run(func() { e.Importer.RunPoller(ctx, e.cfg.PollInterval, e.cfg.ActiveFor) })
	}
	if !l.exclusive {
		run(func() { e.takeEvents(ctx) })
		if e.cfg.PollInterval > 0 {
			run(func() { e.takeActiveDirs(ctx) })
		}
	}
	if !e.cfg.ReadOnly {
		run(func() { e.Exporter.Run(ctx) })
		run(func() { e.serveFlushes(ctx) })
	}
}

// watch stops term's work once its validUntil has passed without a
// renewal moving it on, whatever the renewals are doing (an Update that
// hangs on an unreachable store included).
func (l *leadership) watch(term *leaderTerm) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-term.ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		left := time.Until(term.validUntil)
		l.mu.Unlock()
		if left <= 0 {
			l.e.log.Warn("this server could not renew the sync lease in time: it stops exporting and importing")
			term.stop()
			return
		}
		t.Reset(left)
	}
}

// endTerm stops the leader's work, if it runs, and waits for it.
func (l *leadership) endTerm() {
	l.mu.Lock()
	term := l.term
	l.term = nil
	l.mu.Unlock()
	if term == nil {
		return
	}
	term.stop()
	term.done.Wait()
}

// serveFlushes carries out, while this server leads, the flushes other
// servers ask for (meta.AskFlush): each pass exports everything queued
// and records the number of the last flush asked before it began.
func (e *Engine) serveFlushes(ctx context.Context) {
	every := min(100*time.Millisecond, e.cfg.LeaseTime/4)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		asked, done, err := e.Meta.FlushesAsked(ctx)
		if err != nil || asked <= done.Done {
			continue
		}
		d := meta.FlushDone{Done: asked}
		if err := e.Exporter.Flush(ctx); err != nil {
			if ctx.Err() != nil {
				return // the next leader does it
			}
			d.Err = err.Error()
		}
		if err := e.Meta.FlushesDone(ctx, d); err != nil && ctx.Err() == nil {
			e.log.Warn("record a flush asked by another server", "err", err)
		}
	}
}

// handOffEvents takes the keys the webhook of a server without the sync
// lease is told of to the shared store, where the holder takes them
// (takeEvents); the holder (and a server with a store of its own) keeps
// them.
func (e *Engine) handOffEvents(ctx context.Context, keys []string) (bool, error) {
	if e.leader == nil || e.leader.exclusive || e.IsLeader() {
		return false, nil
	}
	return true, e.Meta.AddEventKeys(ctx, keys)
}

// takeEvents queues, while this server leads, the event keys other
// servers' webhooks handed over. A key taken and not yet revalidated when
// the lease moves on is lost like an event dropped for a full queue: the
// poller finds the change.
func (e *Engine) takeEvents(ctx context.Context) {
	t := time.NewTicker(min(100*time.Millisecond, e.cfg.LeaseTime/4))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		keys, err := e.Meta.TakeEventKeys(ctx, 1000)
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("events handed over by other servers", "err", err)
			}
			continue
		}
		if len(keys) > 0 {
			e.Importer.NotifyWebhook(keys)
		}
	}
}

// publishActiveDirs hands, every poll interval, the directories used
// through this server since the last time to the shared store, while it
// does not hold the sync lease: the holder's poller re-lists them
// (takeActiveDirs). Runs on every server of a shared store until ctx ends.
func (e *Engine) publishActiveDirs(ctx context.Context) {
	published := map[meta.Ino]time.Time{}
	every(ctx, e.cfg.PollInterval, func() {
		if e.IsLeader() {
			return // its own poller has them
		}
		now := time.Now()
		changed := map[meta.Ino]time.Time{}
		for dir, at := range e.Importer.ActiveDirs(now.Add(-e.cfg.ActiveFor)) {
			if !published[dir].Equal(at) {
				changed[dir] = at
			}
		}
		if err := e.Meta.PublishActiveDirs(ctx, changed); err != nil {
			if ctx.Err() == nil {
				e.log.Warn("hand the directories in use to the server that polls", "err", err)
			}
			return
		}
		maps.Copy(published, changed)
		maps.DeleteFunc(published, func(_ meta.Ino, at time.Time) bool { return at.Before(now.Add(-e.cfg.ActiveFor)) })
	})
}

// takeActiveDirs has this server's poller, while it leads, re-list the
// directories other servers report in use: each one counts as used here
// when its record changes, so it stays polled for ActiveFor after the
// last use another server reported.
func (e *Engine) takeActiveDirs(ctx context.Context) {
	seen := map[meta.Ino]int64{}
	look := func() {
		dirs, err := e.Meta.ActiveDirs(ctx, time.Now().Add(-e.cfg.ActiveFor))
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("directories in use on other servers", "err", err)
			}
			return
		}
		for dir, at := range dirs {
			if seen[dir] != at {
				e.Importer.Used(dir)
			}
		}
		seen = dirs
	}
	look()
	every(ctx, e.cfg.PollInterval, look)
}

// flush exports what is pending now (one inode: ino != 0) and returns once
// the bucket has it. On the leader it runs the exporter under the fence;
// on another server it asks the leader to flush everything and waits for
// that flush (whatever ino names): what was pending when it was asked is
// exported when it returns.
func (e *Engine) flush(ctx context.Context, ino meta.Ino) error {
	if e.stop == nil { // not started: the caller drives the exporter
		if ino != 0 {
			return e.Exporter.FlushInode(ctx, ino)
		}
		return e.Exporter.Flush(ctx)
	}
	if fctx, ok := e.leader.fenced(ctx); ok {
		if ino != 0 {
			return e.Exporter.FlushInode(fctx, ino)
		}
		return e.Exporter.Flush(fctx)
	}
	n, err := e.Meta.AskFlush(ctx)
	if err != nil {
		return err
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		_, done, err := e.Meta.FlushesAsked(ctx)
		if err != nil {
			return err
		}
		if done.Done >= n {
			if done.Err != "" {
				return fmt.Errorf("flush by the server holding the sync lease: %s", done.Err)
			}
			return nil
		}
		if fctx, ok := e.leader.fenced(ctx); ok {
			// This server took the lease meanwhile.
			return e.Exporter.Flush(fctx)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("flush: waiting for the server holding the sync lease: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Announce records an address this server serves (what: "nfs", ...) in
// the server registry, for status.
func (e *Engine) Announce(what, addr string) {
	if e.leader != nil {
		e.leader.announce(what, addr)
	}
}

// ServerID is this server's id in the registry (new at every start).
func (e *Engine) ServerID() string { return e.leader.self.ID }

// IsLeader tells whether this server holds the sync lease now.
func (e *Engine) IsLeader() bool { return e.leader != nil && e.leader.current() != nil }

// selfID is this server's id as a number, as the change log and the
// records of locks and opens name it.
func (l *leadership) selfID() uint64 {
	b, _ := hex.DecodeString(l.self.ID)
	return binary.BigEndian.Uint64(b)
}

// Self implements vfs.Liveness.
func (l *leadership) Self() uint64 { return l.selfID() }

// Alive implements vfs.Liveness, from memory (it is asked inside kv
// transactions). A server is alive while this one has seen its beat
// change within the lease time (lookAtPeers watches every lease/4). One
// this server has not seen yet counts as alive until a look at the
// registry that began after the question finds it absent: a server
// registers before it serves, so one that holds a record and is missing
// from the registry then has left it (a clean stop, or removed as dead),
// and a server that started after the last look is found by the next.
// Rule: a live server is never taken for dead; a dead one is taken for
// alive at most about two lease times plus one look.
func (l *leadership) Alive(server uint64) bool {
	id := fmt.Sprintf("%016x", server)
	l.mu.Lock()
	defer l.mu.Unlock()
	if id == l.self.ID {
		return true
	}
	if o, ok := l.peers[id]; ok {
		return time.Since(o.since) < l.leaseTime
	}
	if _, ok := l.gone[id]; ok {
		return false
	}
	if _, ok := l.asked[id]; !ok {
		l.asked[id] = time.Now()
	}
	return true
}

// earlierRun implements meta.Options.EarlierRun, from memory: a server
// whose registry record names this server's NFS identity is an earlier
// run of this state directory (the identity lives there, and this run
// holds the directory's lock, so that run is dead, by a crash or a stop
// that left its clients' locks for them to reclaim). Its records of locks,
// opens and share reservations do not hold against this run, whose
// clients reclaim what they held through it; the other servers honour
// them until they find it dead, as for any dead server, and then they go.
func (l *leadership) earlierRun(server uint64) bool {
	id := fmt.Sprintf("%016x", server)
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.peers[id]
	return ok && l.earlierRunLocked(o.srv)
}

// earlierRunOf is earlierRun for a registry record.
func (l *leadership) earlierRunOf(s meta.Server) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.earlierRunLocked(s)
}

// earlierRunLocked is earlierRunOf. A record with this directory's NFS
// identity that is not among its runs (once the start has read them) is a
// copy's, which is no earlier run (nfsidentity.go). Requires l.mu.
func (l *leadership) earlierRunLocked(s meta.Server) bool {
	return s.ID != l.self.ID && l.self.NFS != "" && s.NFS == l.self.NFS && (l.runs == nil || l.runs[s.ID])
}

// noteGoneHolders notes as gone, at the start, the servers that hold lock,
// open or share records in the store and are absent from the registry:
// a server registers before it serves, so one whose records were there
// before a look at the registry that misses it had left the registry
// (a clean stop that left its clients' locks, or removed as dead). Without
// this, such a server would count as alive until a look that began after
// a question about it (Alive), and its records would bind this one, a
// restart's own earlier run's included, for that long.
func (l *leadership) noteGoneHolders(ctx context.Context) error {
	holders, err := l.e.Meta.RecordHolders(ctx)
	if err != nil || len(holders) == 0 {
		return err
	}
	srvs, err := l.e.Meta.Servers(ctx)
	if err != nil {
		return err
	}
	listed := map[string]bool{}
	for _, s := range srvs {
		listed[s.ID] = true
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for server := range holders {
		if id := fmt.Sprintf("%016x", server); !listed[id] && id != l.self.ID {
			l.gone[id] = now
		}
	}
	return nil
}

// noteGone moves the servers asked about before a look at the registry
// began (start) and absent from it (seen) to gone, and forgets gone
// servers after an hour (their records are deleted by whoever finds them
// dead).
func (l *leadership) noteGone(seen map[string]bool, start, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, t := range l.asked {
		switch {
		case seen[id]:
			delete(l.asked, id)
		case t.Before(start):
			delete(l.asked, id)
			l.gone[id] = now
		}
	}
	for id, t := range l.gone {
		if now.Sub(t) > time.Hour {
			delete(l.gone, id)
		}
	}
}

// writablePeer tells whether a live server that is not read-only is in
// the registry.
func (l *leadership) writablePeer() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, o := range l.peers {
		if !o.srv.ReadOnly && time.Since(o.since) < l.leaseTime {
			return true
		}
	}
	return false
}

// sharedSettings sums up the settings every server of one file system
// must have alike (meta.Server.Settings): the owner and modes given to
// what carries none (applied when an inode is read, so two servers would
// show one file differently), the export delay (due times in the shared
// queue) and the lease time (failover and the liveness of locks).
func sharedSettings(cfg Config) string {
	d := meta.StandardDefaults()
	if cfg.Defaults != nil {
		d = *cfg.Defaults
	}
	return fmt.Sprintf("uid=%d gid=%d file-mode=%04o dir-mode=%04o export-delay=%s lease=%s",
		d.Uid, d.Gid, d.FileMode, d.DirMode, cfg.ExportDelay, cfg.LeaseTime)
}

// checkSettings refuses to start a server of a shared file system whose
// shared settings differ from a server that has renewed its heartbeat
// within two lease times (by this server's clock; a dead server's record
// is removed after that long).
func (l *leadership) checkSettings(ctx context.Context) error {
	srvs, err := l.e.Meta.Servers(ctx)
	if err != nil {
		return err
	}
	for _, s := range srvs {
		if s.ID == l.self.ID || s.Settings == "" || s.Settings == l.self.Settings {
			continue
		}
		if l.earlierRunOf(s) {
			continue // an earlier run of this state directory
		}
		if time.Since(s.Heartbeat) > 2*l.leaseTime {
			continue
		}
		return fmt.Errorf("%w: server %s (host %s, pid %d) runs with %s; this one has %s: give every server of one file system the same --uid, --gid, --file-mode, --dir-mode and --export-delay",
			ErrSettings, s.ID, s.Host, s.PID, s.Settings, l.self.Settings)
	}
	return nil
}
