package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestAServerStoppedAtCleanupLeavesNoProcessAndNoDirectory(t *testing.T) {
	var pid int
	var root string
	t.Run("owner", func(t *testing.T) {
		begin := time.Now()
		s := Start(t)
		t.Logf("initdb and start took %v", time.Since(begin))
		pid, root = s.cmd.Process.Pid, s.root
		var one int
		if err := connect(t, s.URL()).QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("SELECT 1 = %d, %v", one, err)
		}
		var fsync string
		if err := connect(t, s.URL()).QueryRow(context.Background(), "SHOW fsync").Scan(&fsync); err != nil || fsync != "on" {
			t.Fatalf("fsync = %q, %v; tests of durability need it on", fsync, err)
		}
	})
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("postmaster %d still there after its test ended (kill 0: %v)", pid, err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("server directory %s still there after its test ended (%v)", root, err)
	}
}

func TestTheServerRefusesAWrongPassword(t *testing.T) {
	s := Start(t)
	_, err := pgx.Connect(context.Background(), "postgres://postgres:wrong@"+s.Addr()+"/postgres?sslmode=disable")
	if err == nil {
		t.Fatal("a connection with a wrong password was accepted")
	}
}

// Committed rows survive a fast restart and a kill -9 (crash recovery from
// the write-ahead log); each database of NewDatabase is separate.
func TestCommittedRowsSurviveRestartAndKill(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	a, b := s.NewDatabase(t), s.NewDatabase(t)
	if a == b {
		t.Fatalf("NewDatabase gave the same URL twice: %s", a)
	}
	if _, err := connect(t, a).Exec(ctx, "CREATE TABLE t (n int); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, b).Exec(ctx, "SELECT 1 FROM t"); err == nil {
		t.Fatal("a table of one new database is seen in another")
	}
	count := func(want int) {
		t.Helper()
		var n int
		if err := connect(t, a).QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != want {
			t.Fatalf("rows = %d, %v; want %d", n, err, want)
		}
	}
	s.Restart()
	count(1)
	if _, err := connect(t, a).Exec(ctx, "INSERT INTO t VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	pid := s.cmd.Process.Pid
	backends := childrenOf(pid)
	if len(backends) == 0 {
		t.Fatalf("the postmaster %d has no child processes to kill", pid)
	}
	s.Kill()
	for _, p := range append(backends, pid) {
		if alive(p) {
			t.Errorf("process %d of the server is alive after Kill", p)
		}
	}
	s.Start()
	count(2)
}

// The child process starts a server and exits without its cleanups.
const orphanChildEnv = "BUCKETFS_PGTEST_ORPHAN_CHILD"

// A test process that dies without running its cleanups (a test timeout,
// a crash) leaves no server running: the kernel tells the postmaster.
func TestAServerOfATestProcessThatDiesShutsDown(t *testing.T) {
	if os.Getenv(orphanChildEnv) != "" {
		s := Start(t)
		fmt.Printf("POSTMASTER %d %s\n", s.cmd.Process.Pid, s.root)
		os.Exit(3)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAServerOfATestProcessThatDiesShutsDown$")
	cmd.Env = append(os.Environ(), orphanChildEnv+"=1")
	out, _ := cmd.CombinedOutput()
	var pid int
	var root string
	for _, line := range strings.Split(string(out), "\n") {
		if _, err := fmt.Sscanf(line, "POSTMASTER %d %s", &pid, &root); err == nil {
			break
		}
	}
	if pid == 0 || !strings.HasPrefix(root, os.TempDir()) {
		t.Fatalf("the child did not start a server:\n%s", out)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	deadline := time.Now().Add(startTimeout)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling: the postmaster is not our child
	}
	if alive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the postmaster %d of a test process that died is still running", pid)
	}
}

// Shared starts one server for the process on first use and hands out the
// same one after; M's Run stops it and removes its directory when the
// tests it runs have ended. Each test's database is its own.
func TestTheSharedServerIsStartedOnceAndStoppedAfterTheTests(t *testing.T) {
	var pid int
	var root string
	run := runFunc(func() int {
		begin := time.Now()
		s := Shared(t)
		t.Logf("first Shared took %v", time.Since(begin))
		if again := Shared(t); again != s {
			t.Errorf("a second Shared gave another server")
		}
		pid, root = s.cmd.Process.Pid, s.root
		var urls []string
		for i := 0; i < 2; i++ {
			t.Run(fmt.Sprint("db", i), func(t *testing.T) {
				begin := time.Now()
				url := s.NewDatabase(t)
				t.Logf("NewDatabase took %v", time.Since(begin))
				conn := connect(t, url)
				var n int
				if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_tables WHERE tablename = 'mine'").Scan(&n); err != nil || n != 0 {
					t.Fatalf("a fresh database holds %d tables named mine (%v)", n, err)
				}
				if _, err := conn.Exec(context.Background(), "CREATE TABLE mine (x int)"); err != nil {
					t.Fatal(err)
				}
				urls = append(urls, url)
			})
		}
		if len(urls) != 2 || urls[0] == urls[1] {
			t.Errorf("databases %q: want two different", urls)
		}
		return 7
	})
	if code := M(run).Run(); code != 7 {
		t.Errorf("M's Run returned %d, want the tests' 7", code)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("shared postmaster %d still there after the tests (kill 0: %v)", pid, err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("shared server directory %s still there after the tests (%v)", root, err)
	}
}

type runFunc func() int

func (f runFunc) Run() int { return f() }
