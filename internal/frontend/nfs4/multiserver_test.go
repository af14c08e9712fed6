package nfs4

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/engine"
	"bucketfs/internal/meta"
	"bucketfs/internal/nfsclient"
	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3test"
	"bucketfs/internal/vfs"
)

// Issue 23, point 4: several NFS servers of one file system on one
// PostgreSQL, each its own engine and state directory, over real TCP.
// Filehandles are the file system's; client records are each server's;
// a dead server's locks go to others after the lease time; a restarted
// server's clients reclaim in its grace period; the records of a server
// that never comes back are deleted.

// registryLease is the engines' lease time in these tests; the NFS lease
// is half of it (the default with a Registry).
const registryLease = 4 * time.Second

// renewing renews c's lease (a SEQUENCE every 300 ms) until the returned
// stop is called, which waits for the last renewal; c must not be used
// meanwhile. A test whose client holds state on one server while another
// server restarts needs it: on a loaded machine the restart can take
// longer than the NFS lease of these tests (half of registryLease), and
// then the client's state expires for want of renewal, which is not what
// the test is about.
func renewing(c *tclient) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if _, st := c.call(); st != nfsv4.NFS4_OK {
					c.t.Errorf("renew the lease: %s", nfsv4.Nfsstat4_name[st])
					return
				}
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// pgFS is one file system on PostgreSQL and an external bucket.
type pgFS struct {
	t   *testing.T
	url string
	cfg engine.Config // without StateDir
}

func newPGFS(t *testing.T) *pgFS {
	t.Helper()
	url := pgtest.Start(t).NewDatabase(t)
	st, bucket := s3test.NewBucket(t)
	return &pgFS{t: t, url: url, cfg: engine.Config{Meta: url, Bucket: bucket, Endpoint: st.Endpoint,
		AccessKey: st.AccessKey, SecretKey: st.SecretKey, Region: st.Region,
		ExportDelay: time.Hour, OpTimeout: 10 * time.Second, LeaseTime: registryLease, Logger: quietLogger}}
}

// pgNode is one server of a pgFS: an engine and an NFS server on a
// loopback port.
type pgNode struct {
	t    *testing.T
	dir  string
	opts Options
	eng  *engine.Engine
	srv  *Server
	addr string
	// stopServe ends Serve; down: the node was stopped or crashed.
	stopServe func()
	down      bool
}

// start opens a server on state directory dir (a restart when dir was
// used before), as bucketfs serve does: the engine, its NFS identity, the
// engine's start, then the NFS server with the engine as its registry.
func (f *pgFS) start(dir string, opts Options) *pgNode {
	t := f.t
	t.Helper()
	cfg := f.cfg
	cfg.StateDir = dir
	eng, err := engine.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	id, err := eng.NFSIdentity()
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	eng.Start()
	if _, err := eng.FS.SetAttr(context.Background(), vfs.Root, 1, vfs.SetAttrIn{Valid: vfs.SetMode, Mode: 0o777}); err != nil {
		eng.Close()
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger
	}
	opts.Identity, opts.Registry = id, eng
	srv, err := New(context.Background(), eng.FS, opts)
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx, ln); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	n := &pgNode{t: t, dir: dir, opts: opts, eng: eng, srv: srv, addr: ln.Addr().String(),
		stopServe: func() { cancel(); <-done }}
	t.Cleanup(n.stop)
	return n
}

// stop stops the node cleanly, as a signal to bucketfs serve does.
func (n *pgNode) stop() {
	if n.down {
		return
	}
	n.down = true
	n.stopServe()
	n.srv.Close()
	if err := n.eng.Close(); err != nil {
		n.t.Errorf("close engine: %v", err)
	}
}

// crash stops the node as the death of its process would: the NFS server
// stops serving and writes nothing more (no record changed, no lock or
// open released), and the engine stops without a release (engine.Crash).
func (n *pgNode) crash() {
	n.t.Helper()
	if n.down {
		return
	}
	n.down = true
	s := n.srv
	s.mu.Lock()
	s.closed = true
	for ln := range s.listeners {
		ln.Close()
	}
	conns := slices.Collect(maps.Keys(s.conns))
	s.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	close(s.stop)
	s.reaperWG.Wait()
	n.stopServe()
	if err := n.eng.Crash(); err != nil {
		n.t.Errorf("crash engine: %v", err)
	}
}

// env lets the package's raw test client dial the node.
func (n *pgNode) env() *env { return &env{t: n.t, srv: n.srv, addr: n.addr} }

// lockLedger has x, a new client of n, create the file ledger and hold a
// write lock on its bytes [0, 100); it returns x, the file's handle and
// x's open stateid.
func lockLedger(t *testing.T, n *pgNode) (x *tclient, fh []byte, sid nfsv4.Stateid4) {
	t.Helper()
	x = n.env().dial(1, userCred)
	x.session("x")
	fh, sid = openFile(t, x, "o", "ledger")
	x.do(putfh(fh), lockNew(x, sid, "l", nfsv4.WRITE_LT, 0, 100))
	return x, fh, sid
}

// openLedger has w, a new client of n (uid 1001), open the file ledger; it
// returns w and its open stateid.
func openLedger(t *testing.T, n *pgNode) (w *tclient, sid nfsv4.Stateid4) {
	t.Helper()
	w = n.env().dial(1, authSys(1001, 1001))
	w.session("w")
	out := w.do(putroot(), openArgs(w, 0, "o", "ledger", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil))
	return w, openOK(t, out[1]).Stateid
}

// client dials the node with the project's NFS client (4.1).
func (n *pgNode) client(cfg nfsclient.Config) *nfsclient.Client {
	n.t.Helper()
	cfg.MinorVersion = 1
	c, err := nfsclient.Dial(context.Background(), n.addr, cfg)
	if err != nil {
		n.t.Fatalf("dial %s: %v", n.addr, err)
	}
	n.t.Cleanup(func() { c.Close() })
	return c
}

// records returns the owners of the client records of the node's identity.
func (n *pgNode) records(t *testing.T, via *pgNode) map[string]bool {
	t.Helper()
	recs, err := via.eng.Meta.ClientRecords(context.Background(), n.opts.Identity)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for owner := range recs {
		if owner != stopRecord {
			out[owner] = true
		}
	}
	return out
}

// A filehandle obtained through one server works through another server
// of the file system: GETATTR, OPEN by handle, READ and WRITE, and a
// LOOKUP there gives the same handle. The servers say in EXCHANGE_ID that
// they share a scope and are not one server.
func TestAFilehandleFromOneServerWorksThroughAnother(t *testing.T) {
	f := newPGFS(t)
	a, b := f.start(t.TempDir(), Options{}), f.start(t.TempDir(), Options{})
	ctx := context.Background()
	ca, cb := a.client(nfsclient.Config{}), b.client(nfsclient.Config{})

	root, err := ca.RootFH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := ca.Mkdir(ctx, root, "d", nfsclient.Attrs{}.WithMode(0o755))
	if err != nil {
		t.Fatal(err)
	}
	fa, err := ca.Create(ctx, dir, "f", nfsclient.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Write(ctx, fa, 0, []byte("written through a"), nfsv4.FILE_SYNC4); err != nil {
		t.Fatal(err)
	}
	if err := ca.CloseFile(ctx, fa); err != nil {
		t.Fatal(err)
	}

	attrs, err := cb.GetAttr(ctx, fa.FH, nfsclient.CommonAttrs())
	if err != nil {
		t.Fatalf("GETATTR through b of a's filehandle: %v", err)
	}
	if attrs.Size != uint64(len("written through a")) {
		t.Fatalf("size through b: %d; want %d", attrs.Size, len("written through a"))
	}
	fb, err := cb.OpenFH(ctx, fa.FH, nfsclient.OpenOptions{})
	if err != nil {
		t.Fatalf("OPEN through b of a's filehandle: %v", err)
	}
	data, _, err := cb.Read(ctx, fb, 0, 100)
	if err != nil || string(data) != "written through a" {
		t.Fatalf("READ through b: %q, %v", data, err)
	}
	if _, err := cb.Write(ctx, fb, 0, []byte("WRITTEN"), nfsv4.FILE_SYNC4); err != nil {
		t.Fatalf("WRITE through b: %v", err)
	}
	if err := cb.CloseFile(ctx, fb); err != nil {
		t.Fatal(err)
	}
	looked, err := cb.LookupPath(ctx, "d/f")
	if err != nil || !bytes.Equal(looked, fa.FH) {
		t.Fatalf("LOOKUP of d/f through b: %x, %v; want a's handle %x", looked, err, fa.FH)
	}
	if _, err := cb.GetAttr(ctx, dir, nfsclient.CommonAttrs()); err != nil {
		t.Fatalf("GETATTR through b of a's directory handle: %v", err)
	}
	fa, err = ca.OpenFH(ctx, fa.FH, nfsclient.OpenOptions{Access: nfsv4.OPEN4_SHARE_ACCESS_READ})
	if err != nil {
		t.Fatal(err)
	}
	if data, _, err := ca.Read(ctx, fa, 0, 100); err != nil || string(data) != "WRITTEN through a" {
		t.Fatalf("READ through a after b's write: %q, %v", data, err)
	}

	sa, _ := ca.Session()
	sb, _ := cb.Session()
	ea, eb := sa.ExchangeID, sb.ExchangeID
	if !bytes.Equal(ea.EirServerScope, eb.EirServerScope) {
		t.Errorf("server scopes %q and %q: want one scope for the file system", ea.EirServerScope, eb.EirServerScope)
	}
	if bytes.Equal(ea.EirServerOwner.SoMajorId, eb.EirServerOwner.SoMajorId) {
		t.Errorf("both servers answer server owner %q: a client would take them for one server and share a client id", ea.EirServerOwner.SoMajorId)
	}
}

// On a shared file system an NFS server needs an identity of its own,
// and a lease its clients lose before the other servers take it for dead.
func TestAnNFSServerOfASharedFileSystemNeedsAnIdentityAndAShortEnoughLease(t *testing.T) {
	f := newPGFS(t)
	a := f.start(t.TempDir(), Options{})
	ctx := context.Background()
	if _, err := New(ctx, a.eng.FS, Options{Logger: quietLogger}); err == nil {
		t.Error("an NFS server without an identity started on a shared file system")
	}
	if _, err := New(ctx, a.eng.FS, Options{Logger: quietLogger, Identity: 99, Registry: a.eng,
		LeaseTime: registryLease}); err == nil {
		t.Error("an NFS server started with a lease as long as the registry's")
	}
	if a.srv.lease != registryLease/2 {
		t.Errorf("NFS lease %v; want half the registry's %v", a.srv.lease, registryLease)
	}
}

// A client of a server that dies keeps its lock against the other
// servers' clients until the server is known dead, and no longer: then a
// client of another server gets it. What it wrote and synced is not lost.
func TestTheLocksOfADeadServersClientsGoToOthersAfterTheLeaseTime(t *testing.T) {
	f := newPGFS(t)
	a, b := f.start(t.TempDir(), Options{}), f.start(t.TempDir(), Options{})
	ctx := context.Background()
	ca := a.client(nfsclient.Config{})
	cb := b.client(nfsclient.Config{RenewInterval: 200 * time.Millisecond})
	root, err := ca.RootFH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fa, err := ca.Create(ctx, root, "ledger", nfsclient.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Write(ctx, fa, 0, []byte("synced through a"), nfsv4.FILE_SYNC4); err != nil {
		t.Fatal(err)
	}
	if err := ca.Lock(ctx, fa, nfsv4.WRITE_LT, 0, 100); err != nil {
		t.Fatal(err)
	}
	fb, err := cb.Open(ctx, root, "ledger", nfsclient.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	denied := func(err error) bool { return errors.Is(err, nfsclient.Status(nfsv4.NFS4ERR_DENIED)) }
	if err := cb.Lock(ctx, fb, nfsv4.WRITE_LT, 50, 10); !denied(err) {
		t.Fatalf("LOCK through b of a range a's client holds: %v; want NFS4ERR_DENIED", err)
	}

	a.crash()
	crashed := time.Now()
	if err := cb.Lock(ctx, fb, nfsv4.WRITE_LT, 50, 10); !denied(err) {
		t.Fatalf("LOCK through b just after a died: %v; want NFS4ERR_DENIED (a's client still holds its lease)", err)
	}
	var got time.Duration
	deadline := crashed.Add(3*registryLease + 10*time.Second)
	for {
		err := cb.Lock(ctx, fb, nfsv4.WRITE_LT, 50, 10)
		if err == nil {
			got = time.Since(crashed)
			break
		}
		if !denied(err) {
			t.Fatalf("LOCK through b after a died: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("b's client never got the lock of a's dead client (waited %v)", time.Since(crashed))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the lock of the dead server's client went to another server's client %v after the crash (registry lease %v, NFS lease %v)",
		got.Round(time.Millisecond), registryLease, b.srv.lease)
	if got < b.srv.lease {
		t.Errorf("the lock went %v after the crash, before the dead server's client's lease of %v could run out", got, b.srv.lease)
	}
	if data, _, err := cb.Read(ctx, fb, 0, 100); err != nil || string(data) != "synced through a" {
		t.Fatalf("READ through b of what a's client synced: %q, %v", data, err)
	}
}

// A server that restarts after a crash (same state directory) runs a
// grace period for its own clients alone: its client reclaims its lock
// there, the other server's clients and records are untouched, and the
// reclaimed lock binds the other server's clients once the dead run is
// forgotten.
func TestAClientReclaimsItsLockWhenItsServerRestartsNextToAnother(t *testing.T) {
	f := newPGFS(t)
	dirA := t.TempDir()
	a, b := f.start(dirA, Options{}), f.start(t.TempDir(), Options{})
	ctx := context.Background()

	// y, a client of b, holds an open (so a record) and renews.
	y := b.client(nfsclient.Config{OwnerID: "y", RenewInterval: 200 * time.Millisecond})
	root, err := y.RootFH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := y.Create(ctx, root, "y-file", nfsclient.OpenOptions{}); err != nil {
		t.Fatal(err)
	}
	// x, a client of a, locks [0,100) of the ledger.
	x, fh, sid := lockLedger(t, a)
	if !a.records(t, a)["4.1:x"] || !b.records(t, b)["4.1:y"] {
		t.Fatalf("records: a %v, b %v; want x under a and y under b", a.records(t, a), b.records(t, b))
	}
	ownerA, oldID := a.srv.serverOwner(), a.eng.ServerID()

	a.crash()
	a = f.start(dirA, Options{})
	if got := a.srv.serverOwner(); !bytes.Equal(got, ownerA) {
		t.Errorf("server owner after the restart %q; want %q as before", got, ownerA)
	}
	a.srv.state.mu.Lock()
	reclaimable := slices.Sorted(maps.Keys(a.srv.state.grace.reclaimable))
	a.srv.state.mu.Unlock()
	if !slices.Equal(reclaimable, []string{"4.1:x"}) {
		t.Fatalf("the restarted server waits for %q; want its own client x alone", reclaimable)
	}

	// A new client of the restarted server waits; one of b does not.
	z := a.env().dial(1, authSys(1001, 1001))
	z.session("z")
	z.expect(nfsv4.NFS4ERR_GRACE, putroot(), openArgs(z, 0, "o", "z-file", nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o644)))
	w := b.env().dial(1, authSys(1001, 1001))
	w.session("w")
	out := w.do(putroot(), openArgs(w, 0, "o", "w-file", nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o644)))
	openOK(t, out[1])

	// x comes back and reclaims its open and its lock.
	x = a.env().dial(1, userCred)
	if x.sessionOnly("x") {
		t.Fatal("the restarted server knew x's client id")
	}
	out = x.do(putfh(fh), openPrevious(x, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	sid = openOK(t, out[1]).Stateid
	x.do(putfh(fh), lockReclaim(x, sid, "l", nfsv4.WRITE_LT, 0, 100))
	x.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})

	// The reclaimed lock binds b's clients, also once b has taken the
	// crashed run for dead.
	out = w.do(putroot(), openArgs(w, 0, "o2", "ledger", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil))
	wsid := openOK(t, out[1]).Stateid
	w.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(w, wsid, "wl", nfsv4.WRITE_LT, 50, 1))
	deadline := time.Now().Add(3*registryLease + 10*time.Second)
	for {
		srvs, err := b.eng.Meta.Servers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(srvs, func(s meta.Server) bool { return s.ID == oldID }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the crashed run of a stayed in the registry")
		}
		x.do() // SEQUENCE alone: both clients keep their leases
		w.do()
		time.Sleep(50 * time.Millisecond)
	}
	w.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(w, wsid, "wl", nfsv4.WRITE_LT, 50, 1))

	// b's client y and its record are as they were: a's restart and grace
	// period did not touch them.
	waitFor(t, func() bool {
		a.srv.state.mu.Lock()
		defer a.srv.state.mu.Unlock()
		return a.srv.state.grace.pruned
	}, "the restarted server's grace period to end")
	if !b.records(t, b)["4.1:y"] {
		t.Fatalf("b's records after a's restart: %v; want y's", b.records(t, b))
	}
	if got := a.records(t, a); !got["4.1:x"] || got["4.1:y"] {
		t.Fatalf("a's records after its grace period: %v; want x's and not y's", got)
	}
	if err := y.Renew(ctx); err != nil {
		t.Fatalf("b's client after a's restart: %v", err)
	}
}

// The client records of a server that dies and never comes back are
// deleted by another server once the registry has not listed it for
// ForgetAfter, and not before; while it runs they stay, however long. The
// deleting server's own records stay. A server that comes back after that
// has no client to wait for.
func TestTheRecordsOfAServerThatNeverComesBackAreDeleted(t *testing.T) {
	const forget = 3 * time.Second
	f := newPGFS(t)
	dirA := t.TempDir()
	a := f.start(dirA, Options{ForgetAfter: forget})
	b := f.start(t.TempDir(), Options{ForgetAfter: forget})
	ctx := context.Background()
	for _, n := range []*pgNode{a, b} {
		c := n.client(nfsclient.Config{OwnerID: "holder", RenewInterval: 200 * time.Millisecond})
		root, err := c.RootFH(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Create(ctx, root, "held-"+n.addr, nfsclient.OpenOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// While a runs, b leaves its records alone, for longer than forget.
	for until := time.Now().Add(forget + 2*time.Second); time.Now().Before(until); {
		if !a.records(t, b)["4.1:holder"] {
			t.Fatal("b deleted the client record of a, which runs")
		}
		time.Sleep(100 * time.Millisecond)
	}

	a.crash()
	crashed := time.Now()
	deadline := crashed.Add(2*registryLease + forget + 15*time.Second)
	for {
		recs, err := b.eng.Meta.ClientRecords(ctx, a.opts.Identity)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's client records are still there %v after it died: %q", time.Since(crashed), slices.Collect(maps.Keys(recs)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	gone := time.Since(crashed)
	t.Logf("the records of the dead server were deleted %v after it died (registry lease %v, ForgetAfter %v)",
		gone.Round(time.Millisecond), registryLease, forget)
	if gone < registryLease+forget {
		t.Errorf("a's records went %v after it died: before the registry could have missed it for %v", gone, forget)
	}
	if !b.records(t, b)["4.1:holder"] {
		t.Errorf("b's own client record went too: %v", b.records(t, b))
	}

	a = f.start(dirA, Options{ForgetAfter: forget})
	a.srv.state.mu.Lock()
	inGrace := a.srv.state.inGrace(time.Now())
	a.srv.state.mu.Unlock()
	if inGrace {
		t.Error("a server whose records were deleted came back with a grace period")
	}
}

// A clean stop of a server is a restart to its clients, as a crash is:
// the locks they hold stay theirs against the other servers' clients
// until the lease time, and they reclaim them when the server is back.
func TestTheLocksOfAServerThatStopsCleanlyHoldForTheOthersUntilItsClientsReclaim(t *testing.T) {
	f := newPGFS(t)
	dirA := t.TempDir()
	a, b := f.start(dirA, Options{}), f.start(t.TempDir(), Options{})
	x, fh, sid := lockLedger(t, a)
	w, wsid := openLedger(t, b)

	a.stop()
	w.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(w, wsid, "wl", nfsv4.WRITE_LT, 50, 1))

	stop := renewing(w)
	a = f.start(dirA, Options{})
	x = a.env().dial(1, userCred)
	if x.sessionOnly("x") {
		t.Fatal("the restarted server knew x's client id")
	}
	out := x.do(putfh(fh), openPrevious(x, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	sid = openOK(t, out[1]).Stateid
	x.do(putfh(fh), lockReclaim(x, sid, "l", nfsv4.WRITE_LT, 0, 100))
	x.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	stop()
	w.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(w, wsid, "wl", nfsv4.WRITE_LT, 50, 1))
}

// Two clients of a server that crashed hold locks on one file; after the
// restart, the first one's reclaim does not free the second one's lock
// for another server's client: the earlier run's records bind the other
// servers until they find it dead, and the second client reclaims its
// lock.
func TestOneClientsReclaimDoesNotFreeAnotherClientsLockForOtherServers(t *testing.T) {
	f := newPGFS(t)
	dirA := t.TempDir()
	a, b := f.start(dirA, Options{}), f.start(t.TempDir(), Options{})
	x1 := a.env().dial(1, userCred)
	x1.session("x1")
	fh, sid1 := openFile(t, x1, "o", "ledger")
	x1.do(putfh(fh), lockNew(x1, sid1, "l", nfsv4.WRITE_LT, 0, 100))
	x2 := a.env().dial(1, userCred)
	x2.session("x2")
	_, sid2 := openFile(t, x2, "o", "ledger")
	x2.do(putfh(fh), lockNew(x2, sid2, "l", nfsv4.WRITE_LT, 200, 100))
	w := b.env().dial(1, authSys(1001, 1001))
	w.session("w")
	out := w.do(putroot(), openArgs(w, 0, "o", "ledger", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil))
	wsid := openOK(t, out[1]).Stateid

	a.crash()
	a = f.start(dirA, Options{})
	x1 = a.env().dial(1, userCred)
	x1.sessionOnly("x1")
	out = x1.do(putfh(fh), openPrevious(x1, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	x1.do(putfh(fh), lockReclaim(x1, openOK(t, out[1]).Stateid, "l", nfsv4.WRITE_LT, 0, 100))
	x1.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})

	w.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(w, wsid, "wl", nfsv4.WRITE_LT, 250, 1))
	x2 = a.env().dial(1, userCred)
	x2.sessionOnly("x2")
	out = x2.do(putfh(fh), openPrevious(x2, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	x2.do(putfh(fh), lockReclaim(x2, openOK(t, out[1]).Stateid, "l", nfsv4.WRITE_LT, 200, 100))
	x2.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	w.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(w, wsid, "wl", nfsv4.WRITE_LT, 250, 1))
	w.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(w, wsid, "wl", nfsv4.WRITE_LT, 50, 1))
}
