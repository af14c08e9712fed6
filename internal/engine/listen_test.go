package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// An address in use for the metrics listener fails Open (ErrMetricsListen,
// EADDRINUSE) and leaves the state directory free for the next start; it
// used to be a warning at Start that also took the admin socket away
// (issue 22).
func TestOpenFailsWhenTheMetricsAddressIsInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cfg := listenerConfig(t)
	cfg.MetricsListen = held.Addr().String()
	e, err := Open(context.Background(), cfg)
	if err == nil {
		e.Close()
		t.Fatalf("Open with MetricsListen %s in use: no error", cfg.MetricsListen)
	}
	if !errors.Is(err, ErrMetricsListen) || !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), cfg.MetricsListen) {
		t.Errorf("Open with MetricsListen in use: %v, want ErrMetricsListen, EADDRINUSE and the address", err)
	}
	cfg.MetricsListen = "127.0.0.1:0"
	startEngine(t, cfg) // the failed Open let go of the state directory
}

// The admin socket and the metrics listener do not depend on each other:
// a state directory whose path is too long for a unix socket leaves
// /metrics served on the listener.
func TestTheMetricsListenerServesWithoutTheAdminSocket(t *testing.T) {
	cfg := listenerConfig(t)
	cfg.StateDir = filepath.Join(cfg.StateDir, strings.Repeat("long-state-directory-", 6))
	if len(AdminSocket(cfg.StateDir)) <= 108 {
		t.Fatalf("%s fits a unix socket address", AdminSocket(cfg.StateDir))
	}
	e := startEngine(t, cfg)
	if _, err := os.Stat(AdminSocket(cfg.StateDir)); err == nil {
		t.Fatalf("an admin socket at a path too long for one")
	}
	resp, err := http.Get(e.MetricsURL() + "/metrics")
	if err != nil {
		t.Fatalf("/metrics without the admin socket: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "bucketfs_pending_exports") {
		t.Errorf("/metrics without the admin socket: %s\n%.300s", resp.Status, body)
	}
}
