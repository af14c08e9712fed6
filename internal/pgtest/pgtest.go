// Package pgtest starts a real PostgreSQL server for tests, from the
// Debian package's binaries (/usr/lib/postgresql/<newest>/bin), never a
// mock.
//
// Start runs initdb into a fresh temporary directory and postgres on a free
// 127.0.0.1 port, with no unix socket, fsync on (tests of durability rely on
// it: a commit that returned is on disk) and small memory settings. The
// server belongs to the test that started it: t.Cleanup stops it (a fast
// shutdown, SIGKILL if that does not end it) and removes its directory, so
// no server is ever left running. One server may serve several tests of a
// package, each in a database ([Server.NewDatabase]) or schema of its own.
//
// Shared is the other way to have a server: one for the whole test process,
// started on first use and stopped by Main after the tests, for the many
// tests that only want a database of their own (as package testkv's do).
//
// Running as root (as CI does), initdb and postgres run with the
// credentials of the postgres user the Debian package creates; PostgreSQL
// refuses to run as root. If the binaries are missing, Start fails the test
// naming the package to install: these tests are never skipped.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Password is the password of the superuser "postgres" of every test
// server; connections over TCP authenticate with it (scram-sha-256), as a
// real deployment's would.
const Password = "pgtest-secret"

// installRoot is where Debian installs PostgreSQL's versions side by side.
const installRoot = "/usr/lib/postgresql"

// startTimeout bounds how long a start (or a stop) may take before the
// test fails: generous, because the machine may be busy.
const startTimeout = 2 * time.Minute

// Server is one running (or stopped) PostgreSQL cluster owned by a test,
// or the process's shared one (see Shared).
type Server struct {
	t      testing.TB // the owning test; nil for the shared server and Launch's
	shared bool       // the process's shared server (Shared)
	bin  string     // the directory of initdb and postgres
	root string     // temporary directory: data/, postgres.log
	data string
	port int
	cred *syscall.Credential // nil when not running as root

	mu     sync.Mutex
	cmd    *exec.Cmd     // the postmaster; nil while stopped
	exited chan struct{} // closed when cmd has been waited for

	databases atomic.Int64 // names handed out by NewDatabase
}

// Start initializes a cluster in a fresh temporary directory and starts it.
// The server is stopped and its directory removed when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t}
	t.Cleanup(s.remove)
	if err := s.launch(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s
}

// Launch is Start for a program that is not a test (the crash checker):
// the server is the caller's, who stops it and removes its directory with
// Remove. Should the process die first, the server follows it.
func Launch() (*Server, error) {
	s := &Server{}
	if err := s.launch(); err != nil {
		s.remove()
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	return s, nil
}

// Remove stops a server from Launch and removes its directory.
func (s *Server) Remove() { s.remove() }

// Database creates the database name and returns its URL.
func (s *Server) Database(name string) (string, error) {
	if err := s.exec("CREATE DATABASE " + name); err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	return s.DatabaseURL(name), nil
}

// launch finds the binaries, initializes the cluster in a fresh temporary
// directory and starts the server. On failure what it made is left for
// remove.
func (s *Server) launch() (err error) {
	if s.bin, err = findBinaries(); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		if s.cred, err = postgresCredential(); err != nil {
			return err
		}
	}
	// Not t.TempDir: its directories are 0700 root, which the postgres
	// user could not enter.
	if s.root, err = os.MkdirTemp("", "pgtest-"); err != nil {
		return err
	}
	if err := os.Chmod(s.root, 0o711); err != nil {
		return err
	}
	s.data = filepath.Join(s.root, "data")
	if err := s.initdb(); err != nil {
		return err
	}
	// A free port may be taken by someone else between the probe and
	// postgres's bind: try a few.
	for attempt := 0; ; attempt++ {
		if s.port, err = freePort(); err != nil {
			return err
		}
		err = s.start()
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "could not bind") {
			return err
		}
	}
}

// remove stops the server and removes its directory.
func (s *Server) remove() {
	s.stop()
	if s.root == "" {
		return
	}
	if err := os.RemoveAll(s.root); err != nil {
		s.errorf("pgtest: remove %s: %v", s.root, err)
	}
}

// errorf reports a failure of the server's owner: its test, or for the
// shared server (which no test owns) the process's standard error.
func (s *Server) errorf(format string, args ...any) {
	if s.t != nil {
		s.t.Errorf(format, args...)
		return
	}
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

// findBinaries returns the bin directory of the newest PostgreSQL version
// installed.
func findBinaries() (string, error) {
	entries, _ := os.ReadDir(installRoot)
	var versions []int
	for _, e := range entries {
		if v, err := strconv.Atoi(e.Name()); err == nil {
			if _, err := os.Stat(filepath.Join(installRoot, e.Name(), "bin", "postgres")); err == nil {
				versions = append(versions, v)
			}
		}
	}
	if len(versions) == 0 {
		return "", fmt.Errorf("no PostgreSQL server binaries in %s/<version>/bin: install the Debian package postgresql (apt-get install postgresql)", installRoot)
	}
	return filepath.Join(installRoot, strconv.Itoa(slices.Max(versions)), "bin"), nil
}

func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL must run as the user postgres, which the Debian package postgresql creates: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// command builds a command of the server's binaries, run as the postgres
// user when we are root.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.root
	cmd.Env = []string{"LC_ALL=C", "TZ=UTC", "PATH=" + s.bin + ":/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	return cmd
}

func (s *Server) chown(path string) error {
	if s.cred == nil {
		return nil
	}
	return os.Chown(path, int(s.cred.Uid), int(s.cred.Gid))
}

func (s *Server) initdb() error {
	pwfile := filepath.Join(s.root, "pwfile")
	if err := os.WriteFile(pwfile, []byte(Password+"\n"), 0o600); err != nil {
		return err
	}
	if err := s.chown(pwfile); err != nil {
		return err
	}
	// initdb writes the log of its own run here, and the server later.
	if err := s.chown(s.root); err != nil {
		return err
	}
	// --no-sync: the cluster's first files need not survive a power loss
	// (no test simulates one); every later commit is fsynced.
	out, err := s.command("initdb", "-D", s.data, "-U", "postgres", "--pwfile", pwfile,
		"--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--locale=C", "--no-sync").CombinedOutput()
	os.Remove(pwfile)
	if err != nil {
		return fmt.Errorf("initdb %s: %w\n%s", s.data, err, out)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs postgres on s.port and waits until it accepts connections.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("start: already running")
	}
	logPath := filepath.Join(s.root, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child has its own descriptor
	fsync, conns := "on", "100"
	if s.shared {
		// The shared server is never killed (mustOwn), so no test can
		// see what fsync would keep; off, a new database (several
		// megabytes of write-ahead log) costs a tenth. Its many
		// parallel tests' stores each hold a pool of connections.
		fsync, conns = "off", "400"
	}
	cmd := s.command("postgres", "-D", s.data,
		"-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(s.port),
		"-c", "unix_socket_directories=", // no socket: only TCP
		"-c", "fsync="+fsync, "-c", "synchronous_commit=on", "-c", "full_page_writes=on",
		"-c", "shared_buffers=32MB", "-c", "max_connections="+conns,
		"-c", "logging_collector=off", "-c", "log_min_messages=warning")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Should the test process die without its cleanups (a panic, a test
	// timeout), the kernel sends the postmaster SIGQUIT, an immediate
	// shutdown that ends its backends too. The signal follows the thread
	// that started the process, so that thread is kept, locked, until the
	// server exits.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	started := make(chan error)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			cmd.Wait()
		}
		close(exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	s.cmd, s.exited = cmd, exited

	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, s.URL())
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("postgres on port %d exited while starting: %v\n%s", s.port, cmd.ProcessState, s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("postgres on port %d does not accept connections after %v: %v\n%s", s.port, startTimeout, err, s.logTail())
		}
		select {
		case <-exited:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// logTail returns the end of the server's log, for failure messages.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.root, "postgres.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// URL is the libpq URL of the database "postgres" as the superuser.
func (s *Server) URL() string { return s.DatabaseURL("postgres") }

// DatabaseURL is the URL of the named database.
func (s *Server) DatabaseURL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", Password),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// NewDatabase creates an empty database of its own for t and returns its
// URL. It is dropped when t ends (while the server runs).
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("test%d", s.databases.Add(1))
	if err := s.exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		s.mu.Lock()
		running := s.cmd != nil
		s.mu.Unlock()
		if running {
			if err := s.exec("DROP DATABASE " + name + " WITH (FORCE)"); err != nil {
				t.Errorf("pgtest: %v", err)
			}
		}
	})
	return s.DatabaseURL(name)
}

// exec runs one statement in the database postgres.
func (s *Server) exec(sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// Stop shuts the server down: SIGINT, PostgreSQL's fast shutdown (open
// transactions are rolled back, connections closed, a checkpoint
// written). If it has not exited within the start timeout it is killed.
// Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mustOwn("Stop")
	s.stop()
}

func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
		s.cmd = nil
	case <-time.After(startTimeout):
		s.errorf("pgtest: postgres did not stop within %v of SIGINT; killing it", startTimeout)
		s.kill()
	}
}

// Kill ends the server as a crash would: SIGKILL to the postmaster and to
// every one of its processes at once, so nothing is written after (no
// checkpoint, no shutdown record). What was committed must be found again
// by the next start's recovery, from the write-ahead log.
func (s *Server) Kill() {
	s.mustOwn("Kill")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
}

// kill requires s.mu.
//
// PostgreSQL's backends each lead a process group of their own, so a
// signal to the postmaster's group misses them: kill stops the postmaster
// (so it forks no more), kills its children, then it, and waits until
// none of them is left attached to the old shared memory, which the next
// start would refuse.
func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGSTOP)
	children := childrenOf(pid)
	for _, c := range children {
		syscall.Kill(c, syscall.SIGKILL)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	<-s.exited
	s.cmd = nil
	deadline := time.Now().Add(startTimeout)
	for _, c := range children {
		for alive(c) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond) // polling: no event tells an orphan has gone
		}
	}
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procStat(c); ok && ppid == pid {
			out = append(out, c)
		}
	}
	return out
}

// procStat returns the parent and state of process pid.
func procStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err == nil
}

// alive reports whether process pid exists and is not a zombie (which
// holds no memory; an init that does not reap may leave it).
func alive(pid int) bool {
	_, state, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

// Restart stops the server (fast shutdown) and starts it again on the same
// port and data.
func (s *Server) Restart() {
	s.mustOwn("Restart")
	if s.t != nil {
		s.t.Helper()
	}
	s.Stop()
	s.Start()
}

// Start starts a stopped (or killed) server again on the same port and
// data; after a Kill it runs crash recovery first. A failure fails the
// owning test (panics for a server from Launch: use StartAgain).
func (s *Server) Start() {
	if s.t != nil {
		s.t.Helper()
	}
	if err := s.StartAgain(); err != nil {
		if s.t == nil {
			panic(err)
		}
		s.t.Fatal(err)
	}
}

// StartAgain is Start, returning its error.
func (s *Server) StartAgain() error {
	s.mustOwn("Start")
	if err := s.start(); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// mustOwn stops a test that would stop, kill or restart the shared
// server, which other tests are using: such a test starts its own.
func (s *Server) mustOwn(op string) {
	if s.shared {
		panic("pgtest: " + op + " of the shared server (pgtest.Shared), which other tests use: a test that stops or restarts its server starts its own with pgtest.Start")
	}
}
