package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"bucketfs/internal/bucket"
	kvpebble "bucketfs/internal/kv/pebble"
	"bucketfs/internal/kv/postgres"
	"bucketfs/internal/meta"
	bsync "bucketfs/internal/sync"
	"bucketfs/internal/vfs"
)

// Status is where sync stands, as `bucketfs status` prints it and the
// metrics endpoint exports it.
type Status struct {
	Running bool `json:"running"`
	// FromDatabase says the figures were read from the shared database
	// by a host where no server runs (SharedStatus): Running then says
	// whether any server is live.
	FromDatabase bool      `json:"from_database,omitempty"`
	PID          int       `json:"pid,omitempty"`
	Bucket       string    `json:"bucket"`
	Taken        time.Time `json:"taken"`
	// EventsToken is the secret the /events webhook asks for (see
	// Engine.EventsToken).
	EventsToken string `json:"events_token"`

	PendingExports int   `json:"pending_exports"`
	PendingBytes   int64 `json:"pending_bytes"`
	// PendingBytesPartial says PendingBytes counts only the first
	// queued files (pendingBytesFiles): the queue holds more.
	PendingBytesPartial bool                    `json:"pending_bytes_partial,omitempty"`
	OldestPendingAgeS   float64                 `json:"oldest_pending_age_seconds"`
	ExportDelayS        float64                 `json:"export_delay_seconds"`
	Exported            int64                   `json:"exported"`
	ExportedBytes       int64                   `json:"exported_bytes"`
	ExportFailures      int64                   `json:"export_failures"`
	ExportConflicts     int64                   `json:"export_conflicts"`
	Imported            int64                   `json:"imported"`
	ImportFailures      int64                   `json:"import_failures"`
	ImportFailureKeys   []string                `json:"import_failure_samples,omitempty"`
	ImportConflicts     int64                   `json:"import_conflicts"`
	EventsApplied       int64                   `json:"events_applied"`
	EventsOwn           int64                   `json:"events_own_exports"` // of them, echoes of this file system's exports: no HEAD sent
	EventsDropped       int64                   `json:"events_dropped"`
	EventsPending       int                     `json:"events_pending"`
	LastImportLagS      float64                 `json:"last_import_lag_seconds"`
	LastPoll            time.Time               `json:"last_poll,omitempty"`
	LastCheckpoint      time.Time               `json:"last_checkpoint,omitempty"` // start of the last one that finished
	Listings            []bsync.ListingProgress `json:"listings_in_progress,omitempty"`
	LostFound           int                     `json:"lost_found_files"`
	UploadsInFlight     int                     `json:"uploads_in_flight"` // multipart uploads journaled and not yet ended
	TierBytes           int64                   `json:"tier_bytes"`
	TierDirtyBytes      int64                   `json:"tier_dirty_bytes"`
	TierCleanBytes      int64                   `json:"tier_clean_bytes"`
	S3                  bucket.Stats            `json:"s3"`
	Data                vfs.Stats               `json:"data"`

	// The servers of the file system (leader.go): this one's id, whether
	// it holds the sync lease, the lease's record and every live server.
	// The export queue (PendingExports) is shared by all of them.
	ServerID string         `json:"server_id,omitempty"`
	Leader   bool           `json:"leader"`
	Lease    *LeaseStatus   `json:"lease,omitempty"`
	Servers  []ServerStatus `json:"servers,omitempty"`
}

// LeaseStatus is the sync lease's record.
type LeaseStatus struct {
	Holder string `json:"holder"` // server id ("" when released)
	Token  uint64 `json:"token"`  // the fencing token, one more at every change of holder
	// ExpiresInS is the holder's expiry less the reader's clock: a guide
	// only, the servers' clocks may differ (takeovers do not use it).
	ExpiresInS float64 `json:"expires_in_seconds"`
	LeaseTimeS float64 `json:"lease_time_seconds"`
}

// ServerStatus is one live server of the file system.
type ServerStatus struct {
	ID      string            `json:"id"`
	Host    string            `json:"host"`
	PID     int               `json:"pid"`
	Addrs   map[string]string `json:"addrs,omitempty"`
	Started time.Time         `json:"started"`
	// HeartbeatAgeS is the reader's clock less the server's at its last
	// heartbeat (clocks may differ a little).
	HeartbeatAgeS float64 `json:"heartbeat_age_seconds"`
	Leader        bool    `json:"leader"`
	This          bool    `json:"this"` // the server answering
}

// Status gathers the running engine's figures.
func (e *Engine) Status(ctx context.Context) (Status, error) {
	st := Status{Running: true, PID: os.Getpid(), Bucket: e.Bucket.String(), Taken: time.Now(),
		EventsToken: e.eventsToken, ExportDelayS: e.cfg.ExportDelay.Seconds()}
	if err := queueFigures(ctx, e.Meta, e.cfg.ExportDelay, &st); err != nil {
		return st, err
	}
	ex := e.Exporter.Stats()
	st.Exported, st.ExportedBytes, st.ExportFailures, st.ExportConflicts = ex.Exported, ex.Bytes, ex.Failures, ex.Conflicts
	im := e.Importer.Stats()
	st.Imported, st.ImportFailures, st.ImportFailureKeys, st.ImportConflicts = im.Imported, im.Failures, im.Samples, im.Conflicts
	ev := e.Importer.EventStats()
	st.EventsApplied, st.EventsDropped, st.EventsPending, st.LastImportLagS = ev.Applied, ev.Dropped, ev.Pending, ev.LastLag.Seconds()
	st.EventsOwn = ev.Own
	st.LastPoll = e.Importer.PollStats().LastRun
	if ns := e.lastCheckpoint.Load(); ns != 0 {
		st.LastCheckpoint = time.Unix(0, ns)
	}
	st.Listings = e.Importer.Listings()
	st.S3 = e.Bucket.Stats()
	st.Data = e.FS.Stats()
	if err := e.serverFigures(ctx, &st); err != nil {
		return st, err
	}
	return st, nil
}

// serverFigures fills in the servers, the lease and this server's part.
func (e *Engine) serverFigures(ctx context.Context, st *Status) error {
	l := e.leader
	if l == nil {
		return nil
	}
	lease, err := e.Meta.ReadLease(ctx, meta.SyncLease)
	if err != nil {
		return err
	}
	srvs, err := e.Meta.Servers(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	st.ServerID, st.Leader = l.self.ID, e.IsLeader()
	st.Lease = &LeaseStatus{Holder: lease.Holder, Token: lease.Token, LeaseTimeS: e.cfg.LeaseTime.Seconds()}
	if lease.Holder != "" {
		st.Lease.ExpiresInS = lease.Expiry.Sub(now).Seconds()
	}
	st.Servers = st.Servers[:0]
	for _, s := range srvs {
		if !l.alive(s) || l.earlierRunOf(s) {
			continue // dead, or an earlier run of this very server
		}
		st.Servers = append(st.Servers, ServerStatus{ID: s.ID, Host: s.Host, PID: s.PID, Addrs: s.Addrs,
			Started: s.Started, HeartbeatAgeS: max(now.Sub(s.Heartbeat).Seconds(), 0),
			Leader: s.ID == lease.Holder, This: s.ID == l.self.ID})
	}
	return nil
}

// pendingBytesFiles bounds the queued files whose sizes status adds up
// (PendingBytes): each is a read, and the figures are gathered every
// status interval on every server. Past it the figure is a lower bound.
const pendingBytesFiles = 10_000

// queueFigures fills the export queue and lost+found figures from meta.
func queueFigures(ctx context.Context, m *meta.Store, delay time.Duration, st *Status) error {
	n, oldest, err := m.QueueStats(ctx)
	if err != nil {
		return err
	}
	st.PendingExports = n
	if !oldest.IsZero() {
		// The queue holds the time an inode becomes due: its last change
		// plus the delay.
		st.OldestPendingAgeS = max(time.Since(oldest.Add(-delay)).Seconds(), 0)
	}
	if st.PendingBytes, st.PendingBytesPartial, err = m.PendingBytes(ctx, pendingBytesFiles); err != nil {
		return err
	}
	u, err := m.Usage(ctx)
	if err != nil {
		return err
	}
	st.TierBytes, st.TierDirtyBytes, st.TierCleanBytes = u.Total, u.Dirty, u.Total-u.Dirty
	if st.LostFound, err = m.LostFoundCount(ctx); err != nil {
		return err
	}
	ups, err := m.Uploads(ctx)
	if err != nil {
		return err
	}
	st.UploadsInFlight = len(ups)
	return nil
}

// statusFile is where a running engine leaves its last figures, so that
// status on a stopped file system can show them.
func statusFile(stateDir string) string { return filepath.Join(stateDir, "status.json") }

// saveStatus writes the current figures to the state directory.
func (e *Engine) saveStatus(ctx context.Context) error {
	st, err := e.Status(ctx)
	if err != nil {
		return err
	}
	st.Running = false
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := statusFile(e.cfg.StateDir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, statusFile(e.cfg.StateDir))
}

// OfflineStatus reads the status of a file system that is not running: the
// figures it saved last, with the export queue and lost+found read afresh
// from its metadata. It fails if the file system is running (the caller
// should ask the running process instead).
func OfflineStatus(ctx context.Context, stateDir string, exportDelay time.Duration) (Status, error) {
	var st Status
	b, err := os.ReadFile(statusFile(stateDir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return st, err
	}
	if err == nil {
		if err := json.Unmarshal(b, &st); err != nil {
			return st, fmt.Errorf("read %s: %w", statusFile(stateDir), err)
		}
	}
	if _, err := os.Stat(filepath.Join(stateDir, "meta")); err != nil {
		return st, fmt.Errorf("no file system in %s: %w", stateDir, err)
	}
	lock, err := lockStateDir(stateDir)
	if err != nil {
		return st, err
	}
	defer lock.Close()
	db, err := kvpebble.Open(filepath.Join(stateDir, "meta"), kvpebble.Options{})
	if err != nil {
		return st, err
	}
	defer db.Close()
	m, err := meta.Open(ctx, db, meta.Options{ExportDelay: exportDelay, KeepUnfinished: true})
	if err != nil {
		return st, err
	}
	st.Running, st.PID, st.Taken = false, 0, time.Now()
	st.Listings = nil
	st.ServerID, st.Leader, st.Lease, st.Servers = "", false, nil, nil
	if st.EventsToken, err = eventsToken(ctx, m); err != nil {
		return st, err
	}
	err = queueFigures(ctx, m, exportDelay, &st)
	return st, err
}

// SharedStatus reads the status of a file system whose metadata is on
// PostgreSQL (url, schema) from the database alone, for a host where no
// server of it runs: the shared export queue, lost+found, the sync lease
// and the servers in the registry. Each server counts as live while its
// last heartbeat is younger than its lease time by this host's clock (the
// servers judge each other by their beats instead); the export delay and
// lease time are the servers' own, from their records, else delay and the
// default. It never makes a file system: an empty schema is an error
// (its empty tables are made, as a server's first start would make them).
func SharedStatus(ctx context.Context, url, schema string, delay time.Duration) (Status, error) {
	st := Status{Taken: time.Now(), ExportDelayS: delay.Seconds(), FromDatabase: true}
	db, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, MaxConns: 2})
	if err != nil {
		return st, fmt.Errorf("metadata store: %w", err)
	}
	defer db.Close()
	exists, bucket, err := meta.Described(ctx, db)
	if err != nil {
		return st, err
	}
	if !exists {
		return st, fmt.Errorf("no file system in that database schema (%s): a server makes one at its first start", cmp.Or(schema, "bucketfs"))
	}
	st.Bucket = bucket
	// Open writes nothing to a namespace that exists (but may bring an
	// older one's records up to date, as any server's start would).
	m, err := meta.Open(ctx, db, meta.Options{ExportDelay: delay, KeepUnfinished: true})
	if err != nil {
		return st, err
	}
	srvs, err := m.Servers(ctx)
	if err != nil {
		return st, err
	}
	leaseTime := 10 * time.Second
	for _, s := range srvs {
		if v := settingOf(s.Settings, "export-delay"); v != "" {
			if d, err := time.ParseDuration(v); err == nil {
				delay = d
			}
		}
		if v := settingOf(s.Settings, "lease"); v != "" {
			if d, err := time.ParseDuration(v); err == nil {
				leaseTime = d
			}
		}
	}
	st.ExportDelayS = delay.Seconds()
	if err := queueFigures(ctx, m, delay, &st); err != nil {
		return st, err
	}
	lease, err := m.ReadLease(ctx, meta.SyncLease)
	if err != nil {
		return st, err
	}
	now := time.Now()
	st.Lease = &LeaseStatus{Holder: lease.Holder, Token: lease.Token, LeaseTimeS: leaseTime.Seconds()}
	if lease.Holder != "" {
		st.Lease.ExpiresInS = lease.Expiry.Sub(now).Seconds()
	}
	for _, s := range srvs {
		age := now.Sub(s.Heartbeat)
		if age >= leaseTime {
			continue
		}
		st.Servers = append(st.Servers, ServerStatus{ID: s.ID, Host: s.Host, PID: s.PID, Addrs: s.Addrs,
			Started: s.Started, HeartbeatAgeS: max(age.Seconds(), 0), Leader: s.ID == lease.Holder})
	}
	st.Running = len(st.Servers) > 0
	return st, nil
}

// settingOf returns the value of name in a server's shared settings
// ("name=value" pairs; see sharedSettings).
func settingOf(settings, name string) string {
	for _, f := range strings.Fields(settings) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}
