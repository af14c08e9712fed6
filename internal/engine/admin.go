package engine

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"bucketfs/internal/meta"
)

// AdminSocket is the unix socket a running engine answers `bucketfs
// status` and `bucketfs flush` on.
func AdminSocket(stateDir string) string { return filepath.Join(stateDir, "admin.sock") }

// SocketHandler serves the admin API, as the state directory's socket
// (mode 0600: the file system's owner only) offers it:
//
//	GET  /status          Status as JSON
//	POST /flush[?ino=N]   export now (one inode, or everything queued; on a
//	                      server without the sync lease, the leader exports
//	                      everything queued and this waits for it: leader.go)
//	GET  /metrics         Prometheus metrics
//	POST /events          S3 event notifications (the webhook; needs the token)
func (e *Engine) SocketHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st, err := e.Status(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("POST /flush", func(w http.ResponseWriter, r *http.Request) {
		if e.cfg.ReadOnly {
			http.Error(w, errReadOnlyFlush(r.Context(), e).Error(), http.StatusConflict)
			return
		}
		var err error
		if s := r.URL.Query().Get("ino"); s != "" {
			ino, perr := strconv.ParseUint(s, 10, 64)
			if perr != nil {
				http.Error(w, "bad ino", http.StatusBadRequest)
				return
			}
			err = e.flush(r.Context(), meta.Ino(ino))
		} else {
			err = e.flush(r.Context(), 0)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	e.serveMetricsAndEvents(mux)
	return mux
}

// ListenerHandler serves what the TCP listener (MetricsListen) offers,
// which whoever reaches the address can ask: /metrics, and /events with
// the token. Status (it names keys) and flush stay on the socket.
func (e *Engine) ListenerHandler() http.Handler {
	mux := http.NewServeMux()
	e.serveMetricsAndEvents(mux)
	return mux
}

// metricsCollectors are what /metrics serves: ours (bucketfs_*), and the
// Go runtime's and the process's own figures (go_*, process_*), which
// Prometheus users expect of every exporter. The dashboard in
// deploy/grafana uses only names these describe (a test checks).
func (e *Engine) metricsCollectors() []prometheus.Collector {
	return []prometheus.Collector{collector{e}, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
}

func (e *Engine) serveMetricsAndEvents(mux *http.ServeMux) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(e.metricsCollectors()...)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/events", e.webhook)
}

// EventsToken is the secret the webhook asks of every request (hex): a
// bearer token, or the password of HTTP basic authentication. It is made
// once per state directory.
func (e *Engine) EventsToken() string { return e.eventsToken }

// eventsTokenName names the events token among the file system's secrets.
const eventsTokenName = "events-token"

// eventsToken reads the state directory's events token, making it the
// first time.
func eventsToken(ctx context.Context, m *meta.Store) (string, error) {
	secret, err := m.Secret(ctx, eventsTokenName)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(secret), nil
}

// ErrMetricsListen marks the error of an Open that could not listen on
// Config.MetricsListen.
var ErrMetricsListen = errors.New("metrics listener")

// serveAdmin answers the admin API on the state directory's socket, and
// the metrics and the webhook on the TCP listener Open took (if any), until
// ctx is done. The two are independent: the socket is what status, flush
// and unmount --flush reach, whatever becomes of the TCP listener, and a
// socket that cannot be made leaves the listener serving.
func (e *Engine) serveAdmin(ctx context.Context) error {
	// What net/http logs itself (a failed TLS handshake, a handler's
	// panic) goes to our log, in its format, as a warning.
	errorLog := slog.NewLogLogger(e.log.Handler(), slog.LevelWarn)
	var servers []*http.Server
	var lns []net.Listener
	if e.metricsLn != nil {
		tl := e.metricsLn
		if e.cfg.TLS != nil {
			tl = tls.NewListener(tl, e.cfg.TLS)
		}
		servers = append(servers, &http.Server{Handler: e.ListenerHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: errorLog})
		lns = append(lns, tl)
	}
	sock := AdminSocket(e.cfg.StateDir)
	os.Remove(sock) // stale: we hold the state directory's lock
	ln, sockErr := net.Listen("unix", sock)
	if sockErr == nil {
		os.Chmod(sock, 0o600)
		servers = append(servers, &http.Server{Handler: e.SocketHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: errorLog})
		lns = append(lns, ln)
	}
	for i, srv := range servers {
		go func() {
			if err := srv.Serve(lns[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				e.log.Warn("admin server", "err", err)
			}
		}()
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, srv := range servers {
			srv.Shutdown(sctx)
		}
		if sockErr == nil {
			os.Remove(sock)
		}
	}()
	if sockErr != nil {
		return fmt.Errorf("admin socket: %w", sockErr)
	}
	return nil
}

// StateDir is the engine's absolute state directory.
func (e *Engine) StateDir() string { return e.cfg.StateDir }

// MetricsAddr is the address the metrics listener got ("" if none).
func (e *Engine) MetricsAddr() string { return e.metricsAddr }

// MetricsURL is the base URL of the metrics listener ("" if none): https
// when it serves TLS.
func (e *Engine) MetricsURL() string {
	switch {
	case e.metricsAddr == "":
		return ""
	case e.cfg.TLS != nil:
		return "https://" + e.metricsAddr
	}
	return "http://" + e.metricsAddr
}

// collector exports Status as Prometheus metrics at scrape time.
type collector struct{ e *Engine }

var (
	mReadBytes      = prometheus.NewDesc("bucketfs_data_read_bytes_total", "Bytes read by clients, by where they were served from.", []string{"source"}, nil)
	mWriteBytes     = prometheus.NewDesc("bucketfs_data_write_bytes_total", "Bytes written by clients.", nil, nil)
	mMetaOps        = prometheus.NewDesc("bucketfs_metadata_operations_total", "Metadata operations (lookup, getattr, setattr, create, remove, rename, readdir, xattr).", nil, nil)
	mTierBytes      = prometheus.NewDesc("bucketfs_tier_storage_bytes", "Bytes held in the tier, dirty (not yet exported) or clean.", []string{"state"}, nil)
	mExportAge      = prometheus.NewDesc("bucketfs_export_age_seconds", "Age of the oldest change not yet exported.", nil, nil)
	mImportAge      = prometheus.NewDesc("bucketfs_import_age_seconds", "Time from a change notification to its import, for the last one.", nil, nil)
	mPending        = prometheus.NewDesc("bucketfs_pending_exports", "Inodes waiting for export.", nil, nil)
	mLostFound      = prometheus.NewDesc("bucketfs_lost_found_files", "Entries in the lost+found directory.", nil, nil)
	mImportFailures = prometheus.NewDesc("bucketfs_import_failures_total", "Object keys that could not be imported.", nil, nil)
	mConflicts      = prometheus.NewDesc("bucketfs_conflicts_total", "Names changed on both sides; the file side's version went to lost+found.", nil, nil)
	mExported       = prometheus.NewDesc("bucketfs_exports_total", "Inodes reconciled with the bucket.", nil, nil)
	mS3Requests     = prometheus.NewDesc("bucketfs_s3_requests_total", "S3 requests sent, by type.", []string{"type"}, nil)
	mS3Bytes        = prometheus.NewDesc("bucketfs_s3_bytes_total", "Object bytes moved, by direction.", []string{"direction"}, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mReadBytes, mWriteBytes, mMetaOps, mTierBytes, mExportAge, mImportAge,
		mPending, mLostFound, mImportFailures, mConflicts, mExported, mS3Requests, mS3Bytes} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.e.Status(ctx)
	if err != nil {
		c.e.log.Warn("metrics", "err", err)
		return
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(mReadBytes, float64(st.Data.ReadTierBytes), "tier")
	counter(mReadBytes, float64(st.Data.ReadDirectBytes), "direct")
	counter(mWriteBytes, float64(st.Data.WriteBytes))
	counter(mMetaOps, float64(st.Data.MetadataOps))
	gauge(mTierBytes, float64(st.TierDirtyBytes), "dirty")
	gauge(mTierBytes, float64(st.TierCleanBytes), "clean")
	gauge(mExportAge, st.OldestPendingAgeS)
	gauge(mImportAge, st.LastImportLagS)
	gauge(mPending, float64(st.PendingExports))
	gauge(mLostFound, float64(st.LostFound))
	counter(mImportFailures, float64(st.ImportFailures))
	counter(mConflicts, float64(st.ImportConflicts))
	counter(mExported, float64(st.Exported))
	s3 := st.S3
	for typ, v := range map[string]uint64{"get": s3.Get, "put": s3.Put, "list": s3.List, "head": s3.Head,
		"copy": s3.Copy, "delete": s3.Delete, "multipart": s3.Multipart, "other": s3.Other} {
		counter(mS3Requests, float64(v), typ)
	}
	counter(mS3Bytes, float64(s3.BytesRead), "read")
	counter(mS3Bytes, float64(s3.BytesWritten), "written")
}

// errReadOnlyFlush is the answer to a flush of a read-only file system:
// nothing is exported, and what an earlier run left pending waits.
func errReadOnlyFlush(ctx context.Context, e *Engine) error {
	n, _, err := e.Meta.QueueStats(ctx)
	if err != nil || n == 0 {
		return errors.New("read-only: nothing is exported")
	}
	if n == 1 {
		return errors.New("read-only: nothing is exported; 1 pending export waits for a start without --read-only")
	}
	return fmt.Errorf("read-only: nothing is exported; %d pending exports wait for a start without --read-only", n)
}
