package engine

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/meta"
	"bucketfs/internal/s3test"
	"bucketfs/internal/vfs"
)

// listenerConfig is the configuration of a file system on a new bucket
// with the metrics listener on a free port.
func listenerConfig(t *testing.T) Config {
	srv, name := s3test.NewBucket(t)
	return withTestKV(t, Config{StateDir: t.TempDir(), Bucket: name, Endpoint: srv.Endpoint,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region,
		ExportDelay: time.Hour, PollInterval: -1, RevalidateTTL: -1, MetricsListen: "127.0.0.1:0",
		WrapKV: replayFromEnv(t)})
}

// startEngine opens and starts an engine.
func startEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	if cfg.WrapKV == nil {
		cfg.WrapKV = replayFromEnv(t)
	}
	e, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	e.Start()
	return e
}

// socketClient talks HTTP over the engine's admin socket.
func socketClient(e *Engine) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", AdminSocket(e.StateDir()))
		},
	}}
}

// call sends a request and returns the status and body.
func call(t *testing.T, c *http.Client, method, url, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(`{"Records":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestStatusAndFlushAnswerOnlyOnTheSocketAndTheListenerServesMetricsAndEvents(t *testing.T) {
	e := startEngine(t, listenerConfig(t))
	ctx := context.Background()
	_, f, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "dirty", 0o644, uint32(os.O_RDWR))
	if err != nil {
		t.Fatal(err)
	}
	f.Write(ctx, []byte("not exported"), 0)
	f.Release(ctx)
	pending := func() int {
		n, _, err := e.Meta.QueueStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	tcp, base := http.DefaultClient, "http://"+e.MetricsAddr()
	for _, r := range []struct{ method, path string }{{"GET", "/status"}, {"POST", "/flush"}, {"POST", "/flush?ino=2"}} {
		if code, body := call(t, tcp, r.method, base+r.path, ""); code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s on the TCP listener: %d %.80q, want 404 or 405", r.method, r.path, code, body)
		}
	}
	if n := pending(); n != 1 {
		t.Fatalf("%d exports pending after a flush on the TCP listener, want the file still pending", n)
	}
	if code, body := call(t, tcp, "GET", base+"/metrics", ""); code != http.StatusOK || !strings.Contains(body, "bucketfs_pending_exports 1") {
		t.Errorf("GET /metrics on the TCP listener: %d %.200q", code, body)
	}
	if code, _ := call(t, tcp, "POST", base+"/events", ""); code != http.StatusUnauthorized {
		t.Errorf("POST /events without the token on the TCP listener: %d, want 401", code)
	}
	if code, body := call(t, tcp, "POST", base+"/events", "Bearer "+e.EventsToken()); code != http.StatusNoContent {
		t.Errorf("POST /events with the token on the TCP listener: %d %s", code, body)
	}

	sock := socketClient(e)
	code, body := call(t, sock, "GET", "http://bucketfs/status", "")
	var st Status
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.PendingExports != 1 {
		t.Fatalf("GET /status on the socket: %d %.200q", code, body)
	}
	if st.EventsToken != e.EventsToken() {
		t.Errorf("status shows the events token %q, want %q", st.EventsToken, e.EventsToken())
	}
	if code, body := call(t, sock, "POST", "http://bucketfs/flush", ""); code != http.StatusNoContent {
		t.Fatalf("POST /flush on the socket: %d %s", code, body)
	}
	if n := pending(); n != 0 {
		t.Fatalf("%d exports pending after a flush on the socket", n)
	}
	if code, _ := call(t, sock, "GET", "http://bucketfs/metrics", ""); code != http.StatusOK {
		t.Errorf("GET /metrics on the socket: %d", code)
	}
}

func TestTheEventsTokenIsMadeOncePerStateDirectory(t *testing.T) {
	cfg := listenerConfig(t)
	e := startEngine(t, cfg)
	token := e.EventsToken()
	if b, err := hex.DecodeString(token); err != nil || len(b) != 32 {
		t.Fatalf("events token %q: want 32 bytes in hex", token)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// The status of a stopped file system reads the Pebble store in its
	// state directory: there is none to read on PostgreSQL.
	if !testkv.Postgres() {
		st, err := OfflineStatus(context.Background(), cfg.StateDir, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if st.EventsToken != token {
			t.Errorf("status of the stopped file system shows the token %q, want %q", st.EventsToken, token)
		}
	}
	if again := startEngine(t, cfg).EventsToken(); again != token {
		t.Errorf("after a restart the token is %q, was %q", again, token)
	}
	if other := startEngine(t, listenerConfig(t)).EventsToken(); other == token {
		t.Error("two state directories have the same token")
	}
}

func TestMetricsIncludeTheGoRuntimeAndTheProcessBesideOurs(t *testing.T) {
	e := openEngine(t)
	for name, h := range map[string]http.Handler{"socket": e.SocketHandler(), "listener": e.ListenerHandler()} {
		if got := metric(t, h, "go_goroutines"); got < 1 {
			t.Errorf("%s: go_goroutines %v", name, got)
		}
		if got := metric(t, h, "process_resident_memory_bytes"); got <= 0 {
			t.Errorf("%s: process_resident_memory_bytes %v", name, got)
		}
		metric(t, h, "bucketfs_pending_exports")
	}
}
