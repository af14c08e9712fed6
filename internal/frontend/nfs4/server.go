package nfs4

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"bucketfs/internal/accesspoint"
	"bucketfs/internal/vfs"
)

// Options configure a Server.
type Options struct {
	// AllowNets: client networks allowed to connect (nil = any); other
	// connections are closed at accept.
	AllowNets []netip.Prefix
	// RootSquash maps uid 0 (and gid 0) to nobody (65534).
	RootSquash bool
	// AllowAuthNone accepts AUTH_NONE callers, who run as nobody;
	// otherwise their calls are refused with AUTH_TOOWEAK, all but the NULL
	// ping (isPing), which every client may send.
	AllowAuthNone bool
	// AccessPoints are served as SERVER:/NAME; with any, SERVER:/ is a
	// pseudo-root that lists only them (accesspoint.go).
	AccessPoints []accesspoint.AccessPoint
	// LeaseTime is the lease a client must renew (default 90s; with a
	// Registry, half its lease time, and at most three quarters of it:
	// identity.go).
	LeaseTime time.Duration
	// Identity is this NFS server's identity among the servers of its
	// file system: the same at every start, and no other server's
	// (engine.NFSIdentity). Zero is allowed only on a file system
	// served by this server alone (identity.go).
	Identity uint64
	// Registry, on a file system shared with other servers, tells which
	// NFS servers run; with it, the client records of one gone for
	// ForgetAfter (default DefaultForgetAfter) are deleted (identity.go).
	Registry    Registry
	ForgetAfter time.Duration
	// TLS, if set, lets clients start RPC-with-TLS (tls.go;
	// ServerTLSConfig makes one). TLSRequired refuses every call of a
	// client that has not.
	TLS         *tls.Config
	TLSRequired bool
	Logger      *slog.Logger
}

// Limits of one request and of concurrency.
const (
	maxIO          = 1 << 20          // READ and WRITE payload (maxread, maxwrite)
	maxRecord      = maxIO + 64<<10   // one RPC request
	maxReply       = maxIO + 64<<10   // one COMPOUND reply
	maxOps         = 64               // operations in one COMPOUND
	maxSlots       = 32               // session slots
	maxCachedReply = 64 << 10         // cached reply per slot
	connInflight   = 16               // requests in progress per connection
	serverInflight = 128              // requests in progress per server
	nobody         = 65534            // uid and gid of squashed and AUTH_NONE callers
	nfsProgram     = 100003           // ONC RPC program number of NFS
	idleTimeout    = 15 * time.Minute // a connection silent this long is closed
	writeTimeout   = 60 * time.Second // bound on writing one reply
	defaultLease   = 90 * time.Second // lease when Options.LeaseTime is zero
	readBufSize    = 64 << 10         // buffered reader per connection
	cookieCacheCap = 1 << 16          // READDIR cookies remembered, all directories
)

// Server is an NFSv4 server over one vfs.FS. It is safe for concurrent
// use; Serve may run on several listeners at once.
type Server struct {
	fs       *vfs.FS
	fsid     string
	fsidHash uint64
	fhKey    []byte // the file system's filehandle secret (fh.go)
	opts     Options
	log      *slog.Logger
	aps      accessPoints // accesspoint.go
	lease    time.Duration

	// writeVerf changes on every start: a client that sees it change
	// resends its unstable writes.
	writeVerf [8]byte
	// boot prefixes client ids and stateids of this instance.
	boot uint32

	// identity is Options.Identity (identity.go).
	identity uint64

	state   *stateTable
	cookies *cookieCache
	drc     *drc // 4.0 duplicate request cache (drc.go)
	// recordMu orders the writes of client records (grace.go), so that
	// a record removed and one written for the same owner land in the
	// order they were decided.
	recordMu sync.Mutex
	// shares are the share reservations published for the other servers
	// of a shared file system (shares.go).
	shares shareTable

	inflight chan struct{} // server-wide request slots

	tlsRefusals refusalLog // tls.go

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	stop      chan struct{}
	reaperWG  sync.WaitGroup

	// nextForget and goneSince are forgetGoneServers', used by the
	// reaper alone.
	nextForget time.Time
	goneSince  map[uint64]time.Time
}

// New returns a server for fs. Filehandles carry the file system's id
// (fs.Meta().Fsid()) and a MAC under its filehandle secret, which New
// reads from the file system's kv (making it on first use). New finds the
// access points' roots, making those that are missing.
func New(ctx context.Context, fs *vfs.FS, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := checkIdentity(&opts, fs.Shared()); err != nil {
		return nil, fmt.Errorf("nfs server: %w", err)
	}
	if opts.LeaseTime <= 0 {
		opts.LeaseTime = defaultLease
	}
	key, err := fs.Meta().Secret(ctx, handleSecret)
	if err != nil {
		return nil, fmt.Errorf("nfs server: %w", err)
	}
	fsid := fs.Meta().Fsid()
	s := &Server{fs: fs, fsid: fsid, fsidHash: fsidHash(fsid), fhKey: key, opts: opts,
		log: opts.Logger.With("frontend", "nfs4"), lease: opts.LeaseTime, identity: opts.Identity,
		goneSince: map[uint64]time.Time{},
		cookies:   newCookieCache(cookieCacheCap), drc: newDRC(),
		inflight:  make(chan struct{}, serverInflight),
		listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{},
		stop: make(chan struct{})}
	var seed [12]byte
	rand.Read(seed[:])
	copy(s.writeVerf[:], seed[:8])
	s.boot = binary.BigEndian.Uint32(seed[8:]) | 1
	s.state = newStateTable(s.boot)
	if err := s.setupAccessPoints(ctx, opts.AccessPoints); err != nil {
		return nil, fmt.Errorf("nfs server: %w", err)
	}
	if err := s.startGrace(ctx); err != nil {
		return nil, fmt.Errorf("nfs server: %w", err)
	}
	s.reaperWG.Add(1)
	go s.reap()
	return s, nil
}

// Serve accepts connections on ln until ctx is done, ln is closed or the
// server is closed.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return net.ErrClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) || s.isClosed() {
				return nil
			}
			// Out of descriptors and the like: back off and retry.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("accept", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
				continue
			case <-ctx.Done():
				return nil
			}
		}
		delay = 0
		if !s.allowed(nc.RemoteAddr()) {
			s.log.Info("connection refused: network not allowed", "remote", nc.RemoteAddr().String())
			nc.Close()
			continue
		}
		c := newConn(s, nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		go c.serve()
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// allowed reports whether a client at addr may connect.
func (s *Server) allowed(addr net.Addr) bool {
	if s.opts.AllowNets == nil {
		return true
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	for _, p := range s.opts.AllowNets {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func (s *Server) dropConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Close stops every listener and connection and releases all open files
// and locks the clients held, keeping the records of those that held any
// so that they may reclaim them from the next server on this file system.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for ln := range s.listeners {
		ln.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	close(s.stop)
	s.reaperWG.Wait()
	// The records of the clients that hold state stay in stable storage:
	// to them this is a restart, after which they reclaim (grace.go). On
	// a file system shared with other servers their locks stay too: the
	// store keeps them for the other servers until this server is known
	// dead (the engine leaves its registry record to run out), so that
	// nobody else takes a lock its holder is about to reclaim. Their
	// opens and share reservations are released.
	kept := s.closeRecords()
	for _, cl := range s.state.allClients() {
		s.state.mu.Lock()
		opens := s.state.removeClient(cl)
		s.state.mu.Unlock()
		if s.fs.Shared() && kept[cl.key] {
			s.releaseOpens(opens)
			continue
		}
		s.releaseClient(cl.id, opens)
	}
	return nil
}
