package pgtest

import (
	"sync"
	"testing"
)

// shared is the process's one shared server, started by the first call of
// Shared and stopped by Main.
var shared struct {
	mu  sync.Mutex
	srv *Server
	err error // why the start failed; every later Shared fails with it
}

// Shared returns the test process's shared server, starting it on first
// use. Many tests (the whole package's, in parallel too) use it, each in a
// database of its own from NewDatabase, so the price of initdb and start
// is paid once per process. No test owns it: it must not be stopped,
// killed or restarted (those panic); a test that needs that starts its own
// server with Start.
//
// A package whose tests call Shared runs them from a TestMain that calls
// Main, which stops the server when the tests have run. Should the process
// die first, the server follows it (see Start).
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil && shared.err == nil {
		s := &Server{shared: true}
		if shared.err = s.launch(); shared.err != nil {
			s.remove()
		} else {
			shared.srv = s
		}
	}
	if shared.err != nil {
		t.Fatalf("pgtest: shared server: %v", shared.err)
	}
	return shared.srv
}

// Main runs the tests of m and then stops the shared server, if one was
// started, and removes its directory; it returns m.Run's code, for
// os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// A TestMain that runs m through another such helper passes it M(m)
// instead, e.g. os.Exit(s3test.Main(pgtest.M(m))).
func Main(m interface{ Run() int }) int { return M(m).Run() }

// M wraps m so that its Run stops the shared server after the tests.
func M(m interface{ Run() int }) interface{ Run() int } { return stopAfter{m} }

type stopAfter struct{ m interface{ Run() int } }

func (s stopAfter) Run() int {
	code := s.m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		shared.srv.remove()
		shared.srv = nil
	}
	return code
}
