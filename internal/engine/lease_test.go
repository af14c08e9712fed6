package engine

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bucketfs/internal/bucket"
	"bucketfs/internal/kv"
	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/meta"
	"bucketfs/internal/s3local"
	"bucketfs/internal/s3test"
	"bucketfs/internal/vfs"
)

// cluster is several engines (servers) sharing one kv store and one
// bucket, as servers on several hosts share a database and a bucket.
type cluster struct {
	srv    *s3local.Server
	bucket string
	db     kv.Store
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	srv, name := s3test.NewBucket(t)
	db, err := testkv.Open(t, filepath.Join(t.TempDir(), "meta"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // after every engine's Close (cleanups run last first)
	return &cluster{srv: srv, bucket: name, db: db}
}

// open starts one more server of the cluster with the given lease time,
// reaching the store at endpoint ("" for the store itself); opts change
// its configuration.
func (c *cluster) open(t *testing.T, lease time.Duration, endpoint string, opts ...func(*Config)) *Engine {
	t.Helper()
	if endpoint == "" {
		endpoint = c.srv.Endpoint
	}
	cfg := Config{StateDir: t.TempDir(), KV: c.db, Shared: true, LeaseTime: lease,
		Bucket: c.bucket, Endpoint: endpoint, AccessKey: c.srv.AccessKey, SecretKey: c.srv.SecretKey, Region: c.srv.Region,
		ExportDelay: time.Hour, PollInterval: -1, RevalidateTTL: -1, CheckpointInterval: -1}
	for _, o := range opts {
		o(&cfg)
	}
	e, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	e.Start()
	return e
}

// waitLeader waits until e holds the sync lease and returns how long it
// took.
func waitLeader(t *testing.T, e *Engine, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for !e.IsLeader() {
		if time.Since(start) > within {
			t.Fatalf("server %s did not take the sync lease within %s", e.ServerID(), within)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// writeFile writes data at the start of the file name at the root,
// creating it if needed.
func writeFile(t *testing.T, e *Engine, name, data string) meta.Ino {
	t.Helper()
	ctx := context.Background()
	var h *vfs.Handle
	a, err := e.FS.Lookup(ctx, vfs.Root, meta.RootIno, name)
	switch {
	case err == nil:
		h, err = e.FS.Open(ctx, vfs.Root, a.Ino, uint32(os.O_RDWR))
	default:
		a, h, err = e.FS.Create(ctx, vfs.Root, meta.RootIno, name, 0o644, uint32(os.O_RDWR))
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write(ctx, []byte(data), 0); err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	return a.Ino
}

// bucketBody reads the current object at key through e's bucket client.
func bucketBody(t *testing.T, e *Engine, key string) (string, error) {
	t.Helper()
	rc, _, err := e.Bucket.Get(context.Background(), key, "", 0, -1)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

// versionsOf returns the bodies of every version of key, newest first.
func versionsOf(t *testing.T, e *Engine, key string) []string {
	t.Helper()
	ctx := context.Background()
	l, err := e.Bucket.ListVersions(ctx, "", "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range l.Versions {
		if v.Key != key || v.IsDeleteMarker {
			continue
		}
		rc, _, err := e.Bucket.Get(ctx, key, v.VersionID, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		out = append(out, string(b))
	}
	return out
}

func TestOnlyOneOfTwoServersHoldsTheSyncLeaseAtATime(t *testing.T) {
	c := newCluster(t)
	lease := 400 * time.Millisecond
	a, b := c.open(t, lease, ""), c.open(t, lease, "")
	servers := []*Engine{a, b}
	// Watch for several lease times: exactly one holds the lease from the
	// first renewal on, and it is the one the record names.
	deadline := time.Now().Add(5 * lease)
	leaders := map[string]bool{}
	for time.Now().Before(deadline) {
		n := 0
		for _, e := range servers {
			if e.IsLeader() {
				n++
				leaders[e.ServerID()] = true
			}
		}
		if n > 1 {
			t.Fatal("both servers hold the sync lease")
		}
		time.Sleep(time.Millisecond)
	}
	l, err := a.Meta.ReadLease(context.Background(), meta.SyncLease)
	if err != nil {
		t.Fatal(err)
	}
	if len(leaders) != 1 || !leaders[l.Holder] {
		t.Fatalf("servers that held the lease: %v; the record names %q (token %d)", leaders, l.Holder, l.Token)
	}
	// Status, through either server, shows both servers, the leader and
	// the token.
	for _, e := range servers {
		st, err := e.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Servers) != 2 || st.Lease == nil || st.Lease.Holder != l.Holder || st.Lease.Token != l.Token {
			t.Fatalf("status of %s: servers %+v, lease %+v; want both servers and holder %s", e.ServerID(), st.Servers, st.Lease, l.Holder)
		}
		for _, s := range st.Servers {
			if s.Leader != (s.ID == l.Holder) || s.This != (s.ID == e.ServerID()) || s.Host == "" || s.PID != os.Getpid() {
				t.Errorf("status of %s lists %+v", e.ServerID(), s)
			}
		}
		if st.Leader != (e.ServerID() == l.Holder) {
			t.Errorf("status of %s says leader=%v; the lease is %s's", e.ServerID(), st.Leader, l.Holder)
		}
	}
}

func TestOnlyTheLeaderPollsTheBucketAndAFollowerTakesThePollingOverWithTheLease(t *testing.T) {
	c := newCluster(t)
	lease := 400 * time.Millisecond
	poll := func(cfg *Config) { cfg.PollInterval = 20 * time.Millisecond }
	leader := c.open(t, lease, "", poll)
	waitLeader(t, leader, 5*time.Second)
	follower := c.open(t, lease, "", poll)
	rounds := func(e *Engine, n int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for e.Importer.PollStats().Rounds < n {
			if time.Now().After(deadline) {
				t.Fatalf("server %s polled %d times, want %d", e.ServerID(), e.Importer.PollStats().Rounds, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	rounds(leader, 5)
	if n := follower.Importer.PollStats().Rounds; n != 0 {
		t.Fatalf("the follower polled %d times while the other server held the lease", n)
	}
	leader.Close()
	waitLeader(t, follower, 10*lease)
	rounds(follower, 3)
}

func TestClosingTheLeaderHandsTheLeaseToTheOtherServerWithoutWaitingForItToExpire(t *testing.T) {
	c := newCluster(t)
	// A takeover after expiry would take at least the lease time; a
	// released lease is taken at the other's next look (a quarter of it).
	lease := 8 * time.Second
	a := c.open(t, lease, "")
	waitLeader(t, a, 5*time.Second)
	b := c.open(t, lease, "")
	before, err := b.Meta.ReadLease(context.Background(), meta.SyncLease)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	took := waitLeader(t, b, lease*3/4)
	t.Logf("the other server held the lease %s after the leader's Close", took.Round(time.Millisecond))
	after, err := b.Meta.ReadLease(context.Background(), meta.SyncLease)
	if err != nil {
		t.Fatal(err)
	}
	if after.Holder != b.ServerID() || after.Token != before.Token+1 {
		t.Fatalf("lease after the takeover: %+v; want holder %s, token %d", after, b.ServerID(), before.Token+1)
	}
	srvs, err := b.Meta.Servers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(srvs) != 1 || srvs[0].ID != b.ServerID() {
		t.Fatalf("registry after the leader's Close: %+v; want only %s", srvs, b.ServerID())
	}
}

func TestAKilledLeaderIsReplacedAfterTheLeaseTimeAndCanRecordNothing(t *testing.T) {
	c := newCluster(t)
	lease := 10 * time.Second // the default: the failover the README states
	if testing.Short() {
		lease = time.Second
	}
	a := c.open(t, lease, "")
	waitLeader(t, a, 5*time.Second)
	b := c.open(t, lease, "")
	ino := writeFile(t, a, "f", "pending")
	// What a leader paused now would still hold when it wakes up.
	fctx, ok := a.leader.fenced(context.Background())
	if !ok {
		t.Fatal("the first server does not lead")
	}
	a.leader.killed.Store(true) // renewals stop, no release: a dead (or paused) process
	took := waitLeader(t, b, 3*lease)
	t.Logf("failover after the leader stopped renewing: %s (lease %s, renewed every %s)",
		took.Round(time.Millisecond), lease, lease/4)
	// Its last renewal was at most one renewal interval before the kill,
	// and nobody may take over before the lease time has passed since.
	if took < lease-lease/4 {
		t.Fatalf("the lease was taken over %s after the leader's last renewals stopped, before the lease time %s", took, lease)
	}
	// A leader that is not paused stops on its own, before the takeover.
	if a.IsLeader() {
		t.Fatal("the server that stopped renewing still leads after the other took over")
	}
	// Every transaction under the old fence fails.
	err := a.Meta.Enqueue(fctx, ino, time.Now(), false)
	if !errors.Is(err, meta.ErrFenced) {
		t.Fatalf("a transaction under the old leader's fence: %v, want ErrFenced", err)
	}
	// The new leader does the work: the file goes out.
	if err := b.flush(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if got, err := bucketBody(t, b, "f"); err != nil || got != "pending" {
		t.Fatalf("bucket after the new leader's flush: %q, %v", got, err)
	}
}

func TestAWriteThroughAFollowerIsExportedByTheLeader(t *testing.T) {
	c := newCluster(t)
	lease := 400 * time.Millisecond
	leader := c.open(t, lease, "")
	waitLeader(t, leader, 5*time.Second)
	follower := c.open(t, lease, "")
	writeFile(t, follower, "from-follower", "written through the follower")
	// A flush asked of the follower is carried out by the leader: the
	// bucket has the file when it returns.
	rec := httptest.NewRecorder()
	follower.SocketHandler().ServeHTTP(rec, httptest.NewRequest("POST", "/flush", nil))
	if rec.Code != http.StatusNoContent {
		t.Fatalf("flush through the follower: %d %s", rec.Code, rec.Body)
	}
	if got, err := bucketBody(t, follower, "from-follower"); err != nil || got != "written through the follower" {
		t.Fatalf("bucket after the follower's flush: %q, %v", got, err)
	}
	if n := follower.Exporter.Stats().Exported; n != 0 {
		t.Errorf("the follower exported %d inodes itself", n)
	}
	if n := leader.Exporter.Stats().Exported; n == 0 {
		t.Error("the leader exported nothing")
	}
	st, err := follower.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.PendingExports != 0 || st.Leader {
		t.Errorf("follower's status after the flush: %d pending, leader=%v", st.PendingExports, st.Leader)
	}
}

// putHolder is a proxy in front of the store that holds one chosen PUT:
// before the store sees it, or after the store has written it and before
// its answer reaches the client.
type putHolder struct {
	url     string
	mu      sync.Mutex
	key     string // armed for a PUT of this key ("": none)
	after   bool   // hold the answer, not the request
	arrived chan struct{}
	release chan struct{}
}

func newPutHolder(t *testing.T, srv *s3local.Server) *putHolder {
	h := &putHolder{}
	h.url = s3test.NewProxy(t, srv, h.intercept).URL
	return h
}

// arm holds the next PUT of key (its answer, if after). arrived is closed
// once it is held; release lets it go on.
func (h *putHolder) arm(key string, after bool) (arrived <-chan struct{}, release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.key, h.after, h.arrived, h.release = key, after, make(chan struct{}), make(chan struct{})
	return h.arrived, sync.OnceFunc(func() { close(h.release) })
}

func (h *putHolder) intercept(p *s3test.Proxy, w http.ResponseWriter, r *http.Request) bool {
	h.mu.Lock()
	hold := r.Method == http.MethodPut && h.key != "" && s3test.ObjectKey(r) == h.key &&
		r.URL.Query().Get("partNumber") == ""
	after, arrived, release := h.after, h.arrived, h.release
	if hold {
		h.key = ""
	}
	h.mu.Unlock()
	switch {
	case !hold:
		return false
	case after:
		p.ForwardThen(w, r, func() {
			close(arrived)
			<-release
		})
	default:
		close(arrived)
		<-release
		p.Forward(w, r)
	}
	return true
}

// A leader paused between the intent of an export and its upload, or
// between the upload and its record, that wakes up after another server
// took the lease and exported a newer state, changes nothing: the bucket's
// current object is the newer state, no state is in the bucket twice, and
// the file side records the new leader's export.
func TestAPausedOldLeaderCannotReplaceTheNewLeadersExport(t *testing.T) {
	for _, tc := range []struct {
		name     string
		after    bool     // paused after its upload reached the store
		versions []string // of f, newest first, at the end
	}{
		{"paused before its upload", false, []string{"new state, longer"}},
		{"paused after its upload", true, []string{"new state, longer", "old state"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			lease := time.Second
			hold := newPutHolder(t, c.srv)
			old := c.open(t, lease, hold.url)
			waitLeader(t, old, 5*time.Second)
			next := c.open(t, lease, "")
			ino := writeFile(t, old, "f", "old state")

			// The old leader records its intent and sends its upload,
			// which the proxy holds: the process is paused there. It
			// stops renewing too.
			arrived, release := hold.arm("f", tc.after)
			t.Cleanup(release)
			flushed := make(chan error, 1)
			go func() { flushed <- old.flush(context.Background(), 0) }()
			select {
			case <-arrived:
			case <-time.After(30 * time.Second):
				t.Fatal("the old leader's upload never came")
			}
			old.leader.killed.Store(true)

			// The other server takes over and exports a newer state.
			waitLeader(t, next, 10*lease)
			writeFile(t, next, "f", "new state, longer")
			if err := next.flush(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
			if got, err := bucketBody(t, next, "f"); err != nil || got != "new state, longer" {
				t.Fatalf("bucket after the new leader's export: %q, %v", got, err)
			}

			// The old leader wakes up.
			release()
			select {
			case err := <-flushed:
				t.Logf("the old leader's flush: %v", err)
			case <-time.After(60 * time.Second):
				t.Fatal("the old leader's flush never returned")
			}
			if got, err := bucketBody(t, next, "f"); err != nil || got != "new state, longer" {
				t.Fatalf("bucket after the old leader woke up: %q, %v; want the new leader's export", got, err)
			}
			if vs := versionsOf(t, next, "f"); !slices.Equal(vs, tc.versions) {
				t.Fatalf("versions of f, newest first: %q; want %q", vs, tc.versions)
			}
			in, err := next.Meta.Get(context.Background(), ino)
			if err != nil {
				t.Fatal(err)
			}
			head, err := next.Bucket.Head(context.Background(), "f", "")
			if err != nil {
				t.Fatal(err)
			}
			if len(in.Keys) != 1 || in.Keys[0].VersionID != head.VersionID || in.Dirty() {
				t.Fatalf("the file side records %+v (dirty %v); the bucket holds version %s", in.Keys, in.Dirty(), head.VersionID)
			}
		})
	}
}

// cutStore is a kv store that fails every transaction while cut is set: a
// server cut off from the database that the others still reach.
type cutStore struct {
	kv.Store
	cut atomic.Bool
}

var errCut = errors.New("test: cut off from the store")

func (c *cutStore) View(ctx context.Context, fn func(kv.Reader) error) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Store.View(ctx, fn)
}

func (c *cutStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Store.Update(ctx, fn)
}

func (c *cutStore) UpdateSized(ctx context.Context, size int, fn func(kv.Txn) error) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Store.UpdateSized(ctx, size, fn)
}

// A leader that cannot reach the store stops leading on its own once the
// lease time has passed since its last renewal, before the other server
// takes over: at no moment do both lead. Back in touch, it stays a
// follower.
func TestALeaderCutOffFromTheStoreStopsBeforeAnotherTakesOver(t *testing.T) {
	c := newCluster(t)
	lease := time.Second
	cs := &cutStore{Store: c.db}
	a := c.open(t, lease, "", func(cfg *Config) { cfg.KV = cs })
	t.Cleanup(func() { cs.cut.Store(false) }) // before a's Close
	waitLeader(t, a, 5*time.Second)
	b := c.open(t, lease, "")
	cs.cut.Store(true)
	start := time.Now()
	var aStopped time.Duration
	for !b.IsLeader() {
		if time.Since(start) > 10*lease {
			t.Fatal("nobody took the lease over from the server cut off")
		}
		if aStopped == 0 && !a.IsLeader() {
			aStopped = time.Since(start)
		}
		time.Sleep(time.Millisecond)
	}
	bStarted := time.Since(start)
	if a.IsLeader() || aStopped == 0 {
		t.Fatalf("both servers lead: the one cut off still does %s after it lost the store", bStarted)
	}
	t.Logf("cut off: the leader stopped after %s, the other took over after %s (lease %s)",
		aStopped.Round(time.Millisecond), bStarted.Round(time.Millisecond), lease)
	cs.cut.Store(false)
	// Back: it renews its heartbeat, and does not take the lease back.
	deadline := time.Now().Add(5 * lease)
	for time.Now().Before(deadline) {
		if a.IsLeader() {
			t.Fatal("the server cut off took the lease back from the one that took it over")
		}
		time.Sleep(5 * time.Millisecond)
	}
	st, err := b.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Servers) != 2 {
		t.Fatalf("servers after the reconnection: %+v", st.Servers)
	}
}

// A change event the webhook of a server without the lease receives is
// imported by the leader, through the shared store; the follower queues
// nothing itself.
func TestAnEventSentToAFollowerIsImportedByTheLeader(t *testing.T) {
	c := newCluster(t)
	lease := 400 * time.Millisecond
	leader := c.open(t, lease, "")
	waitLeader(t, leader, 5*time.Second)
	follower := c.open(t, lease, "")
	ctx := context.Background()
	root, err := leader.Meta.Get(ctx, meta.RootIno)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Importer.EnsureListed(ctx, &root); err != nil {
		t.Fatal(err)
	}
	body := "put in the bucket"
	if _, err := leader.Bucket.Put(ctx, "from-outside", strings.NewReader(body), int64(len(body)), bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	event := `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"` + c.bucket +
		`"},"object":{"key":"from-outside","size":17}}}]}`
	req := httptest.NewRequest("POST", "/events", strings.NewReader(event))
	req.Header.Set("Authorization", "Bearer "+follower.EventsToken())
	rec := httptest.NewRecorder()
	follower.ListenerHandler().ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent {
		t.Fatalf("event to the follower: %d %s", rec.Code, rec.Body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := leader.Meta.Lookup(ctx, meta.RootIno, "from-outside"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the object an event named was not imported; leader's events %+v, follower's %+v",
				leader.Importer.EventStats(), follower.Importer.EventStats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ev := follower.Importer.EventStats(); ev.Applied != 0 || ev.Pending != 0 {
		t.Errorf("the follower handled the event itself: %+v", ev)
	}
	if ev := leader.Importer.EventStats(); ev.Applied == 0 {
		t.Errorf("the leader's events: %+v", ev)
	}
}

// A directory used only through a follower is polled by the leader: a
// change the bucket makes in it, without an event, reaches the file
// system.
func TestTheLeaderPollsADirectoryUsedOnlyThroughAFollower(t *testing.T) {
	c := newCluster(t)
	lease := 400 * time.Millisecond
	poll := func(cfg *Config) { cfg.PollInterval = 20 * time.Millisecond }
	leader := c.open(t, lease, "", poll)
	waitLeader(t, leader, 5*time.Second)
	follower := c.open(t, lease, "", poll)
	ctx := context.Background()
	d, err := follower.FS.Mkdir(ctx, vfs.Root, meta.RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := follower.FS.ReadDir(ctx, vfs.Root, d.Ino, "", 100); err != nil {
		t.Fatal(err)
	}
	body := "put in the bucket"
	if _, err := leader.Bucket.Put(ctx, "d/late", strings.NewReader(body), int64(len(body)), bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := leader.Meta.Lookup(ctx, d.Ino, "late"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader's poller never found d/late (%d rounds)", leader.Importer.PollStats().Rounds)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := follower.Importer.PollStats().Rounds; n != 0 {
		t.Errorf("the follower polled %d times", n)
	}
}

// A server whose shared settings (owner and modes of what carries none,
// export delay, lease time) differ from a live server's is refused at
// start with both named; one with the same settings starts.
func TestAServerWithOtherSharedSettingsThanALiveOneIsRefused(t *testing.T) {
	c := newCluster(t)
	c.open(t, time.Second, "")
	var refused error
	func() {
		cfg := Config{StateDir: t.TempDir(), KV: c.db, Shared: true, LeaseTime: time.Second,
			Bucket: c.bucket, Endpoint: c.srv.Endpoint, AccessKey: c.srv.AccessKey, SecretKey: c.srv.SecretKey, Region: c.srv.Region,
			ExportDelay: time.Hour, PollInterval: -1, RevalidateTTL: -1, CheckpointInterval: -1,
			Defaults: &meta.Defaults{Uid: 1000, Gid: 1000, FileMode: 0o644, DirMode: 0o755}}
		e, err := Open(context.Background(), cfg)
		if err == nil {
			e.Close()
		}
		refused = err
	}()
	if !errors.Is(refused, ErrSettings) || !strings.Contains(refused.Error(), "uid=0") || !strings.Contains(refused.Error(), "uid=1000") {
		t.Fatalf("a server with --uid 1000 beside one with uid 0: %v; want ErrSettings naming both", refused)
	}
	c.open(t, time.Second, "") // the same settings
}

// A read-only server leaves the sync lease to a writable one: it takes
// it while alone (imports go on), and hands it over when a writable
// server joins, which then exports.
func TestAReadOnlyServerHandsTheSyncLeaseToAWritableOne(t *testing.T) {
	c := newCluster(t)
	ro := c.open(t, time.Second, "", func(cfg *Config) { cfg.ReadOnly = true })
	waitLeader(t, ro, 10*time.Second)
	rw := c.open(t, time.Second, "")
	waitLeader(t, rw, 20*time.Second)
	if ro.IsLeader() {
		t.Fatal("the read-only server still leads beside a writable one")
	}
}

// A follower that opens a file while the leader's export of it has
// reached the bucket but is not recorded yet (the open compares the file
// with the bucket and finds a version the file side does not record)
// takes that version for the file side's own export, not for a change
// made in the bucket: no conflict, nothing in lost+found, the file reads
// what was written, and the export is recorded once it finishes.
func TestAFollowerOpeningAFileTheLeaderIsExportingSeesNoConflict(t *testing.T) {
	c := newCluster(t)
	hold := newPutHolder(t, c.srv)
	leader := c.open(t, time.Second, hold.url)
	waitLeader(t, leader, 5*time.Second)
	follower := c.open(t, time.Second, "", func(cfg *Config) { cfg.RevalidateTTL = time.Nanosecond })
	ctx := context.Background()
	for round, body := range []string{"first state", "second state, longer"} {
		ino := writeFile(t, follower, "f", body)
		arrived, release := hold.arm("f", true)
		t.Cleanup(release)
		flushed := make(chan error, 1)
		go func() { flushed <- leader.flush(ctx, 0) }()
		select {
		case <-arrived:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the leader's upload never came", round)
		}
		for range 3 {
			h, err := follower.FS.Open(ctx, vfs.Root, ino, uint32(os.O_RDONLY))
			if err != nil {
				t.Fatalf("round %d: open through the follower during the export: %v", round, err)
			}
			buf := make([]byte, 64)
			n, err := h.Read(ctx, buf, 0)
			h.Release(ctx)
			if (err != nil && err != io.EOF) || string(buf[:n]) != body {
				t.Fatalf("round %d: the follower read %q, %v; want %q", round, buf[:n], err, body)
			}
		}
		release()
		if err := <-flushed; err != nil {
			t.Fatalf("round %d: flush: %v", round, err)
		}
		if n, err := follower.Meta.LostFoundCount(ctx); err != nil || n != 0 {
			t.Fatalf("round %d: lost+found holds %d files (%v); want none", round, n, err)
		}
		in, err := follower.Meta.Get(ctx, ino)
		if err != nil {
			t.Fatal(err)
		}
		head, err := follower.Bucket.Head(ctx, "f", "")
		if err != nil {
			t.Fatal(err)
		}
		if len(in.Keys) != 1 || in.Keys[0].VersionID != head.VersionID || in.Dirty() {
			t.Fatalf("round %d: the file side records %+v (dirty %v); the bucket holds version %s", round, in.Keys, in.Dirty(), head.VersionID)
		}
	}
}
