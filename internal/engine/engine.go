// Package engine assembles one bucketfs file system from its parts: the
// state directory and its lock, the bucket (an external S3 store, or the
// embedded default store), the metadata store, the tier, the importer and
// exporter, and the vfs that front ends serve. `bucketfs mount` and
// `bucketfs serve` both start an Engine and put a front end on it.
package engine

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"
	"syscall"
	"time"

	"bucketfs/internal/bucket"
	"bucketfs/internal/kv"
	kvpebble "bucketfs/internal/kv/pebble"
	"bucketfs/internal/kv/postgres"
	"bucketfs/internal/meta"
	"bucketfs/internal/s3local"
	bsync "bucketfs/internal/sync"
	"bucketfs/internal/vfs"

	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"
)

// Config is everything an Engine needs. Zero values take the defaults that
// the command line documents.
type Config struct {
	// StateDir holds the metadata and the tier (file data, in the same
	// store), the lock, and the embedded store. Required.
	StateDir string
	// Bucket is the external bucket ("" runs the embedded store), with an
	// optional Prefix; Endpoint overrides AWS_ENDPOINT_URL.
	Bucket, Prefix, Endpoint string
	// AccessKey and SecretKey, if set, are static credentials for the
	// bucket; otherwise the standard AWS chain applies.
	AccessKey, SecretKey, Region string
	// S3Listen is the embedded store's address (default 127.0.0.1:0: a free
	// port).
	S3Listen string

	ExportDelay     time.Duration // default 60s
	ImportThreshold int64         // default 128 KiB
	DirectReadSize  int64         // default 1 MiB
	// TierCapacity bounds the file data the tier holds (bytes; 0 = no
	// limit): clean data past it is evicted, and writes that would take the
	// unexported data past it fail with ENOSPC.
	TierCapacity int64
	// DiskReserve is the free space writes leave on the state directory's
	// disk for exports and the store's own work (default 64 MiB; negative:
	// none).
	DiskReserve int64
	OpTimeout   time.Duration // bound on one bucket operation (default 30s)
	PartSize    int64         // multipart part size (default 16 MiB)

	// PollInterval is how often recently used directories are re-listed to
	// find bucket-side changes (default 10s; negative: never).
	PollInterval time.Duration
	// ActiveFor is how long a directory counts as recently used (default
	// 10 min).
	ActiveFor time.Duration
	// RevalidateTTL: an open compares a clean file with the bucket when it
	// was last compared longer ago (default 5s; negative: never).
	RevalidateTTL time.Duration
	// CheckpointInterval is how often the metadata and file data are made
	// durable without an fsync from the user (default 5s; negative: never),
	// bounding what a crash can lose of the writes not yet exported.
	CheckpointInterval time.Duration
	// MetricsListen is a TCP address for /metrics and the /events webhook
	// ("" for none; the admin socket in the state directory serves both,
	// and alone serves /status and /flush). Open fails (ErrMetricsListen)
	// when it cannot listen there.
	MetricsListen string
	// TLS, if set, makes the MetricsListen listener serve HTTPS only.
	TLS *tls.Config

	// Defaults are the owner and modes of what carries no attributes of
	// its own: objects imported without bucketfs's metadata, the
	// directories of key prefixes, and the root and lost+found of a new
	// file system (see meta.Defaults). nil: root, 0644 and 0755.
	Defaults *meta.Defaults
	// ReadOnly refuses every change from the front ends (EROFS) and
	// exports nothing: the exporter does not run, flush is refused, and
	// the bucket client refuses every write. Imports go on, so bucket-side
	// changes show. Changes an earlier run left pending (and lost+found)
	// stay as they are until a start without it.
	ReadOnly bool
	// TrustConditionalWrites takes the store's acknowledgement of a
	// conditional write as proof that no other write of the key landed
	// next to it (see bucket.Config.TrustConditionalWrites; AWS S3 is
	// trusted without it).
	TrustConditionalWrites bool

	// MetaFS, if set, is the file system the metadata store (namespace and
	// file data) lives on instead of the operating system's. Power-loss
	// tests pass Pebble's crashable in-memory file system, which can drop
	// every write not synced.
	MetaFS pebblevfs.FS
	// WrapKV, if set, wraps the metadata store before anything uses it.
	// Tests pass package kvreplay's wrapper, which runs every
	// transaction's fn twice, to check that the engine keeps kv's rule
	// that fn may run more than once.
	WrapKV func(kv.Store) kv.Store

	// Shared says other servers use the same metadata store: each
	// transaction is recorded in the change log and this server follows
	// the others' (shared.go).
	Shared bool
	// KV, if set, is the store of the metadata and file data, used instead
	// of a Pebble store under StateDir: several engines (servers) may
	// share one, each with its own StateDir (lock, admin socket). The
	// engine does not close it. With it, the bucket must be external
	// (Bucket), the same for every engine.
	KV kv.Store
	// Meta, if set, is a PostgreSQL URL (libpq form: postgres://user@host/db
	// ?sslmode=...; password from the URL, PGPASSWORD or ~/.pgpass) whose
	// database holds the metadata and file data in schema MetaSchema
	// (default "bucketfs"), shared by every server given the same URL: the
	// engine opens it (Shared is implied) and closes it. It needs an
	// external bucket, as KV does.
	Meta, MetaSchema string
	// LeaseTime is how long the sync lease (see leader.go) lasts without
	// a renewal: a server that holds it and stops renewing is replaced
	// after about this long (default 10s; renewed every quarter of it).
	LeaseTime time.Duration

	Logger *slog.Logger
}

// ErrSettings refuses a server whose settings differ from those of a live
// server of the same file system (see sharedSettings).
var ErrSettings = errors.New("this file system's other servers run with other settings")

// Engine is one running file system.
type Engine struct {
	cfg      Config
	log      *slog.Logger
	lock     *os.File
	Store    *s3local.Server // the embedded store, or nil
	Bucket   *bucket.Client
	KV       kv.Store
	Meta     *meta.Store
	Importer *bsync.Importer
	Exporter *bsync.Exporter
	FS       *vfs.FS

	ownKV         bool        // KV is this engine's own Pebble store: no other server uses it
	closeKV       bool        // KV was opened here (not Config.KV): Close closes it
	leader        *leadership // the registry and the sync lease (leader.go)
	stop          context.CancelFunc
	wg            gosync.WaitGroup
	importerReady atomic.Pointer[bsync.Importer]
	// lastCheckpoint is when the last finished checkpoint started (unix ns):
	// every write that returned before then is durable.
	lastCheckpoint atomic.Int64
	closed         atomic.Bool
	metricsAddr    string
	eventsToken    string       // the webhook's secret (hex)
	webhook        http.Handler // /events, one for both listeners: it caches SNS certificates
	// metricsLn is the MetricsListen listener, taken in Open so that an
	// address in use stops the start; serveAdmin serves it.
	metricsLn net.Listener

	evictions atomic.Int64 // files whose tier copy eviction dropped
	// summaryInterval is SummaryInterval; tests set it shorter before
	// Start. summaryRounds counts the intervals summarize has looked at.
	summaryInterval time.Duration
	summaryRounds   atomic.Int64
}

func (c *Config) defaults() {
	if c.ExportDelay == 0 {
		c.ExportDelay = 60 * time.Second
	}
	if c.ImportThreshold == 0 {
		c.ImportThreshold = 128 << 10
	}
	if c.DirectReadSize == 0 {
		c.DirectReadSize = 1 << 20
	}
	if c.DiskReserve == 0 {
		c.DiskReserve = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.PollInterval == 0 {
		c.PollInterval = 10 * time.Second
	}
	if c.ActiveFor == 0 {
		c.ActiveFor = 10 * time.Minute
	}
	if c.RevalidateTTL == 0 {
		c.RevalidateTTL = 5 * time.Second
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = 5 * time.Second
	}
	if c.LeaseTime <= 0 {
		c.LeaseTime = 10 * time.Second
	}
}

// Open starts every part and returns the engine ready to serve. Call Start
// to run the background exporter, and Close when done.
func Open(ctx context.Context, cfg Config) (e *Engine, err error) {
	if cfg.StateDir == "" {
		return nil, errors.New("engine: no state directory")
	}
	if (cfg.KV != nil || cfg.Meta != "") && cfg.Bucket == "" {
		return nil, errors.New("a shared metadata store needs an external bucket, shared too (--bucket s3://NAME): the embedded store lives on one server")
	}
	if cfg.Meta != "" {
		cfg.Shared = true
	}
	// The embedded store changes the process working directory: make every
	// path absolute first.
	if cfg.StateDir, err = filepath.Abs(cfg.StateDir); err != nil {
		return nil, err
	}
	cfg.defaults()
	eng := &Engine{cfg: cfg, log: cfg.Logger, summaryInterval: SummaryInterval}
	e = eng
	defer func() {
		if err != nil {
			eng.Close()
		}
	}()
	if err := kvpebble.MkdirAllSynced(pebblevfs.Default, cfg.StateDir); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	if e.lock, err = lockStateDir(cfg.StateDir); err != nil {
		return nil, err
	}
	if cfg.MetricsListen != "" {
		if e.metricsLn, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			return nil, fmt.Errorf("%w %s: %w", ErrMetricsListen, cfg.MetricsListen, err)
		}
		e.metricsAddr = e.metricsLn.Addr().String()
	}
	bcfg := bucket.Config{Bucket: cfg.Bucket, Prefix: cfg.Prefix, Endpoint: cfg.Endpoint,
		AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, Region: cfg.Region, OpTimeout: cfg.OpTimeout,
		ReadOnly: cfg.ReadOnly, TrustConditionalWrites: cfg.TrustConditionalWrites, Logger: cfg.Logger}
	if cfg.Bucket == "" {
		// The embedded store tells the importer of every object change in
		// process: no webhook to configure.
		e.Store, err = s3local.Start(ctx, s3local.Config{Dir: filepath.Join(cfg.StateDir, "s3"), Listen: cfg.S3Listen,
			OnEvent: eng.onStoreEvent})
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("embedded store: %w: choose another --s3-listen", err)
		}
		if err != nil {
			return nil, fmt.Errorf("embedded store: %w", err)
		}
		if e.Store.PortMoved != "" {
			e.log.Warn("the embedded store's port was taken by another program: it moved, and s3.env says where",
				"was", e.Store.PortMoved, "endpoint", e.Store.Endpoint)
		}
		if err := e.Store.WriteEnvFile(filepath.Join(cfg.StateDir, "s3.env")); err != nil {
			return nil, err
		}
		bcfg.Bucket, bcfg.Endpoint, bcfg.Region = e.Store.Bucket, e.Store.Endpoint, e.Store.Region
		bcfg.AccessKey, bcfg.SecretKey = e.Store.AccessKey, e.Store.SecretKey
		// The embedded store evaluates If-Match and If-None-Match itself,
		// under a lock of the key that every write adding a version or a
		// delete marker to the key takes (s3local's serialBackend): a
		// conditional write is atomic against every other write there, as
		// on AWS S3, and its 2xx needs no listing to confirm it (one LIST
		// per export saved).
		bcfg.TrustConditionalWrites = true
		// bucketfs's own HEADs (an import makes one per object listed)
		// are answered in process: the same answer without HTTP and
		// request signing (s3local.Server.Head).
		bcfg.LocalHead = e.Store.Head
	}
	if e.Bucket, err = bucket.New(ctx, bcfg); err != nil {
		return nil, err
	}
	if err := e.Bucket.CheckVersioning(ctx); err != nil {
		return nil, err
	}
	switch {
	case cfg.KV != nil:
		e.KV = cfg.KV
	case cfg.Meta != "":
		// Every commit is durable when it returns (synchronous_commit
		// on), not at the next Sync as on Pebble: the database can crash
		// while this server runs on, and a commit it lost then would be
		// one this server already acted on (a lock granted, inode numbers
		// claimed, the lease taken, a write acknowledged); a Sync on the
		// restarted database says nothing of commits the crashed one made.
		// Issue 23's restart test lost fsynced files so with
		// postgres.Options.AsyncCommit.
		if e.KV, err = postgres.Open(ctx, cfg.Meta, postgres.Options{Schema: cfg.MetaSchema, OpTimeout: cfg.OpTimeout}); err != nil {
			return nil, fmt.Errorf("metadata store: %w", err)
		}
		if ps, ok := e.KV.(*postgres.Store); ok && ps.AsyncCommit() {
			e.KV.Close()
			return nil, errors.New("metadata store: the URL sets synchronous_commit=off: bucketfs servers need every commit durable when it returns (a crash of the database would lose commits a server acted on); leave synchronous_commit out, or set on, remote_write or remote_apply")
		}
		e.closeKV = true
	default:
		if e.KV, err = kvpebble.Open(filepath.Join(cfg.StateDir, "meta"), kvpebble.Options{FS: cfg.MetaFS}); err != nil {
			return nil, err
		}
		e.ownKV, e.closeKV = true, true
	}
	if cfg.WrapKV != nil {
		e.KV = cfg.WrapKV(e.KV)
	}
	// One id names this server in the registry, the change log and the
	// records of its locks and opens.
	if e.leader, err = newLeadership(e, e.ownKV); err != nil {
		return nil, err
	}
	e.knownIdentity()
	kept := func(ino meta.Ino, name string) {
		if e.Importer != nil { // set before the file system serves
			e.Importer.KeptInLostFound(ino, name)
		}
	}
	if e.Meta, err = meta.Open(ctx, e.KV, meta.Options{ExportDelay: cfg.ExportDelay, OnKeptInLostFound: kept,
		Defaults: cfg.Defaults, ChangeLog: cfg.Shared, Server: e.leader.selfID(), EarlierRun: e.leader.earlierRun,
		Bucket: "s3://" + e.Bucket.Name() + "/" + e.Bucket.Prefix()}); err != nil {
		return nil, err
	}
	if n, skipped := e.Meta.UndoneWrites(); n > 0 || skipped > 0 {
		e.log.Warn("a crash cut writes short between their pieces: the files are back at their size before each write",
			"files", n, "markers_left_alone", skipped)
	}
	if !cfg.ReadOnly { // read-only writes nothing to the bucket, not even these
		// Multipart uploads the last run started and never ended (a
		// crash) keep their parts in the bucket until aborted; with a
		// store of its own, this is the one moment none of ours is in
		// flight. Failures are logged and left for the next start. (On
		// a shared store the sync lease's holder does it as it takes
		// the lease: leader.go.)
		if e.ownKV {
			bsync.AbortOrphanedUploads(ctx, e.Meta, e.Bucket, e.log)
		}
		supported, err := e.Bucket.ProbeConditionalWrites(ctx, e.Meta.LostFoundName())
		if err != nil {
			return nil, err
		}
		if !supported {
			e.log.Warn("the store ignores conditional writes; bucketfs compares a HEAD before each write instead, " +
				"which leaves a short window in which a concurrent S3 write can be overwritten")
		}
		if !e.Bucket.ConditionalDeletes() {
			e.log.Info("the store ignores If-Match on DELETE: removing a file whose object changed meanwhile in the bucket " +
				"writes a delete marker and takes it back, so for a few milliseconds other readers may miss the object")
		}
		if e.Bucket.ConfirmsWrites() {
			e.log.Debug("each conditional write is confirmed from the key's versions: the store is not AWS S3 " +
				"(--trust-conditional-writes turns this off)")
		}
	}
	if cfg.Shared && !e.ownKV {
		if err := e.leader.noteGoneHolders(ctx); err != nil {
			return nil, err
		}
		if err := e.checkNFSIdentityCopy(ctx); err != nil {
			return nil, err
		}
		if err := e.leader.checkSettings(ctx); err != nil {
			return nil, err
		}
	}
	if e.eventsToken, err = eventsToken(ctx, e.Meta); err != nil {
		return nil, err
	}
	locks := bsync.NewInodeLocks()
	e.Importer = bsync.NewImporter(e.Meta, e.Bucket, bsync.ImporterConfig{Locks: locks, Logger: e.log,
		OnChange: func(c bsync.Change) { eng.FS.Changed(c.Parent, c.Name, c.Ino) }})
	e.webhook = e.Importer.WebhookHandler(bsync.WebhookConfig{Bucket: e.Bucket.Name(), Prefix: e.Bucket.Prefix(),
		Token: e.eventsToken, HandOff: eng.handOffEvents})
	revalidate := cfg.RevalidateTTL
	if revalidate < 0 {
		revalidate = 0
	}
	limit := max(cfg.TierCapacity, 0)
	var liveness vfs.Liveness
	if cfg.Shared {
		liveness = e.leader // locks, opens and shares hold across servers
	}
	e.FS = vfs.New(e.Meta, e.Bucket, e.Importer, vfs.Config{Liveness: liveness,
		ImportThreshold: cfg.ImportThreshold, DirectReadSize: cfg.DirectReadSize,
		RevalidateTTL: revalidate, Logger: e.log,
		TierLimits: meta.Limits{Dirty: limit, Total: limit},
		StateDir:   cfg.StateDir, DiskReserve: max(cfg.DiskReserve, 0), ReadOnly: cfg.ReadOnly})
	poll := min(time.Second, max(cfg.ExportDelay/4, 10*time.Millisecond))
	e.Exporter = bsync.NewExporter(e.Meta, e.Bucket, e.Importer, bsync.ExporterConfig{
		Poll: poll, PartSize: cfg.PartSize, IsOpen: e.FS.InUse, Locks: locks, Logger: e.log,
		HoldWrites: e.FS.HoldWrites})
	return e, nil
}

// onStoreEvent hands an embedded-store event to the importer. Events come
// before the importer exists (the store starts first) and are dropped then:
// nothing is imported yet either. An event of a version created says which
// (NotifyCreated), so that the echo of an export costs no HEAD.
func (e *Engine) onStoreEvent(ev s3local.Event) {
	if ev.Bucket == e.Store.Bucket {
		e.StoreEvent(ev)
	}
}

// StoreEvent hands one object event of the file system's bucket (its key
// relative to the file system's prefix) to the importer, as the embedded
// store's are, once Start has run. Tests feed a shared store's events to
// an engine through it.
func (e *Engine) StoreEvent(ev s3local.Event) {
	im := e.importerReady.Load()
	switch {
	case im == nil:
	case strings.HasPrefix(ev.Name, "s3:ObjectCreated:") && ev.VersionID != "":
		im.NotifyCreated(ev.Key, ev.VersionID, ev.ETag)
	default:
		im.Notify(ev.Key)
	}
}

// Start registers this server and runs, in the background until Close,
// the sync lease's keeper, and while this server holds the lease the
// exporter (unless read-only) and the importer's event workers and poller
// (leader.go); checkpoints, tier eviction and the periodic summary in the
// log run on every server. With a store of its own the engine takes the
// lease before Start returns.
func (e *Engine) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	e.importerReady.Store(e.Importer)
	if e.Store != nil {
		// Every change of the embedded store's bucket comes as an event
		// from now on (StoreEvent), handed over before its request is
		// answered: opens need not ask the store what the events said.
		e.Importer.EventsComplete()
	}
	if err := e.serveAdmin(ctx); err != nil {
		e.log.Warn("no admin socket: status, flush and unmount --flush will not reach this process", "err", err)
	}
	e.leader.round(ctx)
	e.spawn(func() { e.leader.run(ctx) })
	if !e.leader.exclusive && e.cfg.PollInterval > 0 {
		e.spawn(func() { e.publishActiveDirs(ctx) })
	}
	e.spawn(func() {
		every(ctx, 10*time.Second, func() {
			if err := e.saveStatus(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn("save status", "err", err)
			}
		})
	})
	if e.cfg.CheckpointInterval > 0 {
		e.spawn(func() { every(ctx, e.cfg.CheckpointInterval, func() { e.checkpoint(ctx) }) })
	}
	if e.cfg.TierCapacity > 0 {
		e.spawn(func() { every(ctx, 5*time.Second, func() { e.evict(ctx) }) })
	}
	e.spawn(func() { e.summarize(ctx, e.summaryInterval) })
	e.spawn(func() { e.trimFences(ctx) })
	if e.cfg.Shared {
		e.spawn(func() { e.followChanges(ctx) })
		e.spawn(func() { e.trimChanges(ctx) })
	}
}

// spawn runs fn in the background until Close.
func (e *Engine) spawn(fn func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		fn()
	}()
}

// every calls fn every interval until ctx is done.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// checkpoint makes everything committed so far durable: the metadata and
// the file data are one store, so a crash then loses at most the writes of
// the last interval, and whatever it loses, it loses whole transactions
// from the end: every file is left in a state it really had.
func (e *Engine) checkpoint(ctx context.Context) {
	start := time.Now()
	if err := e.Meta.Sync(ctx); err != nil {
		if ctx.Err() == nil {
			e.log.Warn("checkpoint", "err", err)
		}
		return
	}
	e.lastCheckpoint.Store(start.UnixNano())
}

// evict keeps the tier under its capacity: it drops the cached bytes that
// the bucket holds (clean files whole, and the blocks of files with
// unexported changes that hold none of them), least recently used file
// first, until the tier is 10% under its capacity. Unexported blocks,
// open files and anything the bucket lacks stay (meta.EvictData checks it
// again in the transaction that drops the data). Each file evicted is a
// debug line ("tier evicted": ino, key, bytes).
func (e *Engine) evict(ctx context.Context) {
	u, err := e.Meta.Usage(ctx)
	if err != nil || u.Total <= e.cfg.TierCapacity {
		return
	}
	cands, err := e.Meta.Evictable(ctx)
	if err != nil {
		e.log.Warn("tier eviction", "err", err)
		return
	}
	slices.SortFunc(cands, func(a, b meta.Cached) int { return cmp.Compare(e.FS.LastUse(a.Ino), e.FS.LastUse(b.Ino)) })
	over := u.Total - e.cfg.TierCapacity*9/10
	for _, c := range cands {
		if over <= 0 || ctx.Err() != nil {
			return
		}
		if e.FS.IsOpen(c.Ino) {
			continue
		}
		freed, err := e.Meta.EvictData(ctx, c.Ino)
		if err != nil {
			e.log.Warn("tier eviction", "ino", c.Ino, "err", err)
			return
		}
		if freed > 0 {
			e.evictions.Add(1)
			e.logEvicted(ctx, c.Ino, freed)
		}
		over -= freed
	}
}

// Close stops the background work and releases everything, leaving
// unexported changes queued for the next start (or for the next holder
// of the sync lease: Close releases it, and removes this server from the
// registry). Closing twice is harmless.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	if e.stop != nil {
		e.stop()
		e.wg.Wait()
		e.leader.endTerm() // one the test hook left running (leader.go)
	}
	if e.FS != nil {
		e.FS.WaitCloses()
	}
	var errs []error
	if e.stop != nil {
		if err := e.saveStatus(context.Background()); err != nil {
			e.log.Warn("save status", "err", err)
		}
	}
	if e.KV != nil {
		if e.Meta != nil {
			errs = append(errs, e.Meta.Sync(context.Background()))
		}
		if e.closeKV {
			errs = append(errs, e.KV.Close())
		}
	}
	if e.Bucket != nil {
		e.Bucket.Close()
	}
	if e.Store != nil {
		errs = append(errs, e.Store.Close())
	}
	if e.metricsLn != nil && e.stop == nil {
		e.metricsLn.Close() // never served (Start shuts it down otherwise)
	}
	if e.lock != nil {
		errs = append(errs, e.lock.Close())
	}
	return errors.Join(errs...)
}

// lockStateDir takes an exclusive lock on the state directory for the life
// of the process, recording the holder's pid in the lock file.
func lockStateDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock state directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		holder := strings.TrimSpace(string(b))
		if holder == "" {
			holder = "another process"
		} else {
			holder = "process " + holder
		}
		return nil, fmt.Errorf("state directory %s is in use by %s", dir, holder)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}
