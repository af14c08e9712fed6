// Package fuse serves a vfs.FS to the kernel over FUSE with go-fuse's raw
// protocol interface. It holds no file system logic: each request becomes
// one vfs call with the caller's uid, gid and supplementary groups (which
// FUSE does not pass: they are read from /proc, see callers), and FUSE node
// ids are the engine's inode numbers (root is 1 in both). A mount may
// serve one access point instead: its root is the mount's and every
// request runs as its identity (accesspoint.go).
//
// vfs checks permissions itself, the same way for FUSE and NFS. The mount
// also uses the kernel's default_permissions: the kernel resolves names it
// has cached without asking us, and only its own check (on the attributes
// we gave it) covers those walks.
package fuse

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"bucketfs/internal/accesspoint"
	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// Options tune the mount.
type Options struct {
	// AttrTimeout and EntryTimeout are how long the kernel caches
	// attributes and names (default 1s).
	AttrTimeout, EntryTimeout time.Duration
	// Name shows as the mount's source in /proc/mounts.
	Name string
	// ReadAheadKB is the kernel read-ahead window for the mount (default
	// 16 MiB; negative: leave the kernel's).
	ReadAheadKB int
	Debug       bool
	// AccessPoint, if set, is served instead of the whole file system:
	// its root is the mount's root (made if missing) and every request
	// runs as its identity (accesspoint.go).
	AccessPoint *accesspoint.AccessPoint
}

type server struct {
	fuse.RawFileSystem
	fs   *vfs.FS
	opts Options

	mu      sync.Mutex
	next    uint64
	files   map[uint64]*vfs.Handle
	dirs    map[uint64]*dirHandle
	srv     *fuse.Server
	attrTTL time.Duration
	notes   *notifier
	callers *callers
	// root is the inode of the mount's root: meta.RootIno, or an access
	// point's root; apCred, with an access point, is its identity.
	root   vfs.Ino
	apCred *vfs.Cred
}

// Mount mounts fs at mountpoint and serves it until Unmount. The returned
// server is already serving.
func Mount(fs *vfs.FS, mountpoint string, opts Options) (*fuse.Server, error) {
	if opts.AttrTimeout == 0 {
		opts.AttrTimeout = time.Second
	}
	if opts.EntryTimeout == 0 {
		opts.EntryTimeout = time.Second
	}
	if opts.Name == "" {
		opts.Name = "bucketfs"
	}
	if opts.ReadAheadKB == 0 {
		opts.ReadAheadKB = 16 << 10
	}
	st, err := os.Stat(mountpoint)
	switch {
	case err != nil:
		return nil, fmt.Errorf("mountpoint %s: %w", mountpoint, err)
	case !st.IsDir():
		return nil, fmt.Errorf("mountpoint %s is not a directory", mountpoint)
	}
	s := &server{RawFileSystem: fuse.NewDefaultRawFileSystem(), fs: fs, opts: opts,
		files: map[uint64]*vfs.Handle{}, dirs: map[uint64]*dirHandle{}, notes: newNotifier(), callers: newCallers(),
		root: meta.RootIno}
	permissions := []string{"default_permissions"}
	if ap := opts.AccessPoint; ap != nil {
		root, err := ap.Root(context.Background(), fs)
		if err != nil {
			return nil, err
		}
		s.root, s.apCred = root.Ino, &ap.Cred
		permissions = nil
	}
	mo := &fuse.MountOptions{
		FsName:        opts.Name,
		Name:          "bucketfs",
		MaxWrite:      1 << 20,
		MaxReadAhead:  1 << 20,
		MaxBackground: 64,
		EnableLocks:   true,
		// The kernel leaves the clearing of set-id bits on a write or
		// truncate by someone without CAP_FSETID to us, flagging those
		// requests (WRITE_KILL_SUIDGID, FATTR_KILL_SUIDGID,
		// OPEN_KILL_SUIDGID), and sends no flag for a caller with it,
		// who keeps the bits: the rule in vfs/setid.go. Without it the
		// kernel would clear them with a chmod only the owner may make,
		// and ask for security.capability before every write.
		ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV_V2,
		// Reads return byte slices; splicing them through a pipe only adds
		// a copy (and a 1 MiB reply does not fit a default pipe).
		DisableSplice: true,
		Options:       permissions,
		AllowOther:    os.Geteuid() == 0,
		Debug:         opts.Debug,
		// Directories of the file system may be listed by many processes;
		// readdirplus saves a lookup per entry.
		DisableXAttrs: false,
	}
	// The kernel never updates the access time of a FUSE file on a read
	// (it leaves atime to the server), and bucketfs changes it only on
	// utimes: the mount is noatime, and says so.
	mo.Options = append(mo.Options, "noatime")
	if fs.ReadOnly() {
		// The kernel refuses changes itself (EROFS without asking us, and
		// no atime updates), and `mount` shows ro; vfs refuses anything
		// that still comes.
		mo.Options = append(mo.Options, "ro")
	}
	srv, err := fuse.NewServer(s, mountpoint, mo)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	s.srv = srv
	fs.AddInvalidator(s)
	go s.notes.run(srv)
	go func() {
		srv.Serve()
		s.notes.close()
	}()
	if err := srv.WaitMount(); err != nil {
		srv.Unmount()
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	setReadAhead(mountpoint, opts.ReadAheadKB)
	return srv, nil
}

// setReadAhead widens the kernel's read-ahead window for the mount. The
// kernel gives a FUSE mount 128 KiB whatever the server asks for, so
// sequential reads would reach us one request at a time; a wider window
// keeps several large reads in flight. It needs root and is skipped
// otherwise (reads still work, only slower).
func setReadAhead(mountpoint string, kb int) {
	if kb <= 0 {
		return
	}
	var st syscall.Stat_t
	if err := syscall.Stat(mountpoint, &st); err != nil {
		return
	}
	path := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", st.Dev>>8&0xfff, st.Dev&0xff|st.Dev>>12&0xfff00)
	os.WriteFile(path, []byte(fmt.Sprint(kb)), 0o644)
}

func (s *server) String() string { return "bucketfs" }

// InvalidateEntry drops the kernel's cached name (bucket-side change).
func (s *server) InvalidateEntry(parent vfs.Ino, name string) {
	s.notes.add(notice{node: s.node(parent), name: name})
}

// InvalidateInode drops the kernel's cached attributes and pages of ino.
func (s *server) InvalidateInode(ino vfs.Ino) {
	s.notes.add(notice{node: s.node(ino)})
}

// InvalidateLater queues the same notifications without waiting for them
// to be sent (another server's changes: no request of this mount waits on
// them, and a burst of them must not hold the follower 50 ms each).
func (s *server) InvalidateLater(parent vfs.Ino, name string, ino vfs.Ino) {
	if name != "" {
		s.notes.queue(notice{node: s.node(parent), name: name})
	}
	if ino != 0 {
		s.notes.queue(notice{node: s.node(ino)})
	}
}

// notifier sends the kernel its cache invalidations from a goroutine of
// its own, in the order they were made, and the caller waits until its
// notification is sent, as if it had sent it itself, but never longer
// than notifyWait. Rule: no invalidation may hang a request. The kernel
// holds a directory's lock across an rmdir, unlink, create or rename in it
// until we answer, and dropping a name in that directory waits for the
// same lock; the engine may change the namespace inside such a request (a
// directory listed before a start is listed again before a remove in it),
// so a notification sent there would wait for a reply that waits for it.
// The wait keeps the window in which the kernel still shows what an import
// replaced as short as a notification sent in place would, so that a
// reader that opens the file next does not read the new bytes with the old
// size.
type notifier struct {
	mu      sync.Mutex
	cond    *sync.Cond
	pending []notice
	wake    chan struct{}
	closed  bool
	queued  uint64    // notices added so far
	sent    uint64    // notices sent (or dropped) so far
	sending time.Time // when the send in progress began (zero: none)
}

// notifyWait bounds how long a caller waits for its notification.
const notifyWait = 50 * time.Millisecond

type notice struct {
	node uint64 // a FUSE node id (server.node)
	name string // a name in directory node; "" for node itself
}

func newNotifier() *notifier {
	n := &notifier{wake: make(chan struct{}, 1)}
	n.cond = sync.NewCond(&n.mu)
	return n
}

// queue adds x to the notifications to send and returns its sequence
// number (0: the notifier is closed).
func (n *notifier) queue(x notice) uint64 {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return 0
	}
	n.queued++
	seq := n.queued
	n.pending = append(n.pending, x)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
	return seq
}

func (n *notifier) add(x notice) {
	seq := n.queue(x)
	if seq == 0 {
		return
	}
	deadline := time.Now().Add(notifyWait)
	t := time.AfterFunc(notifyWait, func() {
		n.mu.Lock()
		n.cond.Broadcast()
		n.mu.Unlock()
	})
	defer t.Stop()
	n.mu.Lock()
	defer n.mu.Unlock()
	for n.sent < seq && !n.closed && time.Now().Before(deadline) {
		if !n.sending.IsZero() && time.Since(n.sending) >= notifyWait {
			return // stuck behind a lock the kernel holds: do not wait
		}
		n.cond.Wait()
	}
}

// run sends notifications until close; what is pending then is dropped
// (the mount is gone, and its caches with it).
func (n *notifier) run(srv *fuse.Server) {
	for range n.wake {
		n.mu.Lock()
		batch, closed := n.pending, n.closed
		n.pending = nil
		n.mu.Unlock()
		if closed {
			return
		}
		for _, x := range batch {
			n.mu.Lock()
			n.sending = time.Now()
			n.mu.Unlock()
			if x.name != "" {
				srv.EntryNotify(x.node, x.name)
			} else {
				srv.InodeNotify(x.node, 0, -1)
			}
			n.mu.Lock()
			n.sending = time.Time{}
			n.sent++
			n.cond.Broadcast()
			n.mu.Unlock()
		}
	}
}

func (n *notifier) close() {
	n.mu.Lock()
	n.closed, n.pending = true, nil
	n.sent = n.queued
	n.cond.Broadcast()
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// cred is the identity the request in h runs as: the caller's, or the
// access point's.
func (s *server) cred(h *fuse.InHeader) vfs.Cred {
	if s.apCred != nil {
		return *s.apCred
	}
	return s.callers.cred(h)
}

func status(err error) fuse.Status {
	if err == nil {
		return fuse.OK
	}
	return fuse.Status(vfs.Errno(err))
}

func (s *server) fillAttr(a *vfs.Attr, out *fuse.Attr) {
	out.Ino = uint64(a.Ino)
	out.Size = uint64(a.Size)
	out.Blocks = (uint64(a.Size) + 511) / 512
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.Uid, a.Gid
	out.Rdev = a.Rdev
	out.Blksize = 4096
	out.Atime, out.Atimensec = uint64(a.Atime/1e9), uint32(a.Atime%1e9)
	out.Mtime, out.Mtimensec = uint64(a.Mtime/1e9), uint32(a.Mtime%1e9)
	out.Ctime, out.Ctimensec = uint64(a.Ctime/1e9), uint32(a.Ctime%1e9)
}

// fillEntry describes a in out.
func (s *server) fillEntry(a *vfs.Attr, out *fuse.EntryOut) {
	out.NodeId = s.node(a.Ino)
	out.Generation = 1
	out.SetEntryTimeout(s.opts.EntryTimeout)
	out.SetAttrTimeout(s.opts.AttrTimeout)
	s.fillAttr(a, &out.Attr)
}

// entry answers a request that made or found a.
func (s *server) entry(a vfs.Attr, err error, out *fuse.EntryOut) fuse.Status {
	if err != nil {
		return status(err)
	}
	s.fillEntry(&a, out)
	s.fs.Remember(a.Ino)
	return fuse.OK
}

func (s *server) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	ctx, done := untilKilled(cancel, h)
	defer done()
	dir := s.ino(h.NodeId)
	if name == ".." && dir == s.root {
		name = "." // the kernel keeps ".." at the mount's root; we do too
	}
	a, err := s.fs.Lookup(ctx, s.cred(h), dir, name)
	if errors.Is(err, syscall.ENOENT) {
		// A negative entry the kernel may cache briefly.
		out.NodeId = 0
		out.SetEntryTimeout(s.opts.EntryTimeout)
		return fuse.OK
	}
	return s.entry(a, err, out)
}

// Forget: the kernel dropped nlookup of its references to nodeid (each
// entry reply made one).
func (s *server) Forget(nodeid, nlookup uint64) {
	s.fs.Forget(context.Background(), s.ino(nodeid), nlookup)
}

func (s *server) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	ctx, done := untilKilled(cancel, &in.InHeader)
	defer done()
	a, err := s.fs.GetAttr(ctx, s.ino(in.NodeId))
	if err != nil {
		return status(err)
	}
	s.fillAttr(&a, &out.Attr)
	out.SetTimeout(s.opts.AttrTimeout)
	return fuse.OK
}

func (s *server) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	ctx, done := uninterrupted()
	defer done()
	req := vfs.SetAttrIn{Mode: in.Mode, Uid: in.Uid, Gid: in.Gid, Size: int64(in.Size),
		Atime: int64(in.Atime)*1e9 + int64(in.Atimensec), Mtime: int64(in.Mtime)*1e9 + int64(in.Mtimensec)}
	v := in.Valid
	if v&fuse.FATTR_MODE != 0 {
		req.Valid |= vfs.SetMode
	}
	if v&fuse.FATTR_UID != 0 {
		req.Valid |= vfs.SetUid
	}
	if v&fuse.FATTR_GID != 0 {
		req.Valid |= vfs.SetGid
	}
	if v&fuse.FATTR_SIZE != 0 {
		req.Valid |= vfs.SetSize
	}
	if v&fuse.FATTR_ATIME_NOW != 0 {
		req.Valid |= vfs.SetAtimeNow
	} else if v&fuse.FATTR_ATIME != 0 {
		req.Valid |= vfs.SetAtime
	}
	if v&fuse.FATTR_MTIME_NOW != 0 {
		req.Valid |= vfs.SetMtimeNow
	} else if v&fuse.FATTR_MTIME != 0 {
		req.Valid |= vfs.SetMtime
	}
	if v&fuse.FATTR_KILL_SUIDGID != 0 {
		req.Valid |= vfs.DropSetID
	}
	if v&fuse.FATTR_FH != 0 {
		req.Handle = s.file(in.Fh)
	}
	a, err := s.fs.SetAttr(ctx, s.cred(&in.InHeader), s.ino(in.NodeId), req)
	if err != nil {
		return status(err)
	}
	s.fillAttr(&a, &out.Attr)
	out.SetTimeout(s.opts.AttrTimeout)
	return fuse.OK
}

func (s *server) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	ctx, done := uninterrupted()
	defer done()
	a, err := s.fs.Mknod(ctx, s.cred(&in.InHeader), s.ino(in.NodeId), name, in.Mode&^in.Umask, in.Rdev)
	return s.entry(a, err, out)
}

func (s *server) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	ctx, done := uninterrupted()
	defer done()
	a, err := s.fs.Mkdir(ctx, s.cred(&in.InHeader), s.ino(in.NodeId), name, in.Mode&^in.Umask)
	return s.entry(a, err, out)
}

func (s *server) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	ctx, done := uninterrupted()
	defer done()
	return status(s.fs.Unlink(ctx, s.cred(h), s.ino(h.NodeId), name))
}

func (s *server) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	ctx, done := uninterrupted()
	defer done()
	return status(s.fs.Rmdir(ctx, s.cred(h), s.ino(h.NodeId), name))
}

func (s *server) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	ctx, done := uninterrupted()
	defer done()
	var flags uint32
	if in.Flags&1 != 0 { // RENAME_NOREPLACE
		flags |= meta.RenameNoReplace
	}
	if in.Flags&2 != 0 { // RENAME_EXCHANGE
		flags |= meta.RenameExchange
	}
	if in.Flags&^3 != 0 {
		return fuse.EINVAL // RENAME_WHITEOUT is for overlay file systems
	}
	return status(s.fs.Rename(ctx, s.cred(&in.InHeader), s.ino(in.NodeId), oldName, s.ino(in.Newdir), newName, flags))
}

func (s *server) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	ctx, done := uninterrupted()
	defer done()
	a, err := s.fs.Link(ctx, s.cred(&in.InHeader), s.ino(in.Oldnodeid), s.ino(in.NodeId), name)
	return s.entry(a, err, out)
}

func (s *server) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	ctx, done := uninterrupted()
	defer done()
	a, err := s.fs.Symlink(ctx, s.cred(h), s.ino(h.NodeId), name, target)
	return s.entry(a, err, out)
}

func (s *server) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	ctx, done := untilKilled(cancel, h)
	defer done()
	t, err := s.fs.Readlink(ctx, s.ino(h.NodeId))
	return []byte(t), status(err)
}

func (s *server) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	ctx, done := untilKilled(cancel, &in.InHeader)
	defer done()
	return status(s.fs.Access(ctx, s.cred(&in.InHeader), s.ino(in.NodeId), in.Mask&7))
}

func (s *server) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	ctx, done := untilKilled(cancel, h)
	defer done()
	v, err := s.fs.GetXattr(ctx, s.cred(h), s.ino(h.NodeId), attr)
	if err != nil {
		return 0, status(err)
	}
	if len(dest) < len(v) {
		return uint32(len(v)), fuse.ERANGE
	}
	return uint32(copy(dest, v)), fuse.OK
}

func (s *server) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	ctx, done := untilKilled(cancel, h)
	defer done()
	names, err := s.fs.ListXattr(ctx, s.cred(h), s.ino(h.NodeId))
	if err != nil {
		return 0, status(err)
	}
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n)
		b.WriteByte(0)
	}
	if len(dest) < b.Len() {
		return uint32(b.Len()), fuse.ERANGE
	}
	return uint32(copy(dest, b.String())), fuse.OK
}

func (s *server) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	ctx, done := uninterrupted()
	defer done()
	return status(s.fs.SetXattr(ctx, s.cred(&in.InHeader), s.ino(in.NodeId), attr, data, int(in.Flags)))
}

func (s *server) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	ctx, done := uninterrupted()
	defer done()
	return status(s.fs.RemoveXattr(ctx, s.cred(h), s.ino(h.NodeId), attr))
}

func (s *server) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	ctx, done := untilKilled(cancel, h)
	defer done()
	st := s.fs.StatFs(ctx)
	out.Bsize = st.Bsize
	out.Frsize = st.Bsize
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bfree
	out.Files, out.Ffree = st.Files, st.Ffree
	out.NameLen = st.NameLen
	return fuse.OK
}
