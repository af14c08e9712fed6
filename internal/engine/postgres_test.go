package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3test"
)

// A server is not started on a database URL that asks for asynchronous
// commits: the database may crash while the server runs on, and a commit
// lost then would be one the server acted on. The refusal says so, in
// one line that names the setting.
func TestAServerRefusesAMetadataURLWithSynchronousCommitOff(t *testing.T) {
	url := pgtest.Start(t).NewDatabase(t)
	srv, bucket := s3test.NewBucket(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	e, err := Open(context.Background(), Config{StateDir: t.TempDir(), Meta: url + sep + "synchronous_commit=off",
		Bucket: bucket, Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region})
	if err == nil {
		e.Close()
		t.Fatal("a server started on a URL with synchronous_commit=off")
	}
	if !strings.Contains(err.Error(), "synchronous_commit") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("refusal %q: want one line naming synchronous_commit", err)
	}
}

// Status from the database alone, on a host where no server runs: the
// live servers and the lease holder, the shared export queue and the
// bucket; after the servers have stopped, none live and the queue still
// there. A schema that holds no file system is an error, and stays empty.
func TestStatusFromTheSharedDatabaseListsTheLiveServersAndTheQueue(t *testing.T) {
	pg := pgtest.Start(t)
	url := pg.NewDatabase(t)
	srv, bucket := s3test.NewBucket(t)
	ctx := context.Background()
	open := func() *Engine {
		e, err := Open(ctx, Config{StateDir: t.TempDir(), Meta: url, LeaseTime: 2 * time.Second,
			Bucket: bucket, Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region,
			ExportDelay: time.Hour, PollInterval: -1, RevalidateTTL: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		e.Start()
		return e
	}
	a, b := open(), open()
	writeFile(t, a, "f", "hello")
	var st Status
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if st, err = SharedStatus(ctx, url, "", time.Minute); err != nil {
			t.Fatal(err)
		}
		if st.Lease != nil && st.Lease.Holder != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !st.FromDatabase || !st.Running || len(st.Servers) != 2 || st.PendingExports != 1 || st.PendingBytes != 5 || !strings.Contains(st.Bucket, bucket) {
		t.Fatalf("status from the database while two servers run: %+v", st)
	}
	if st.ExportDelayS != time.Hour.Seconds() || st.Lease.LeaseTimeS != 2 {
		t.Errorf("export delay %vs, lease %vs: want the servers' own (3600, 2)", st.ExportDelayS, st.Lease.LeaseTimeS)
	}
	leaders := 0
	for _, s := range st.Servers {
		if s.Leader {
			leaders++
			if s.ID != a.ServerID() && s.ID != b.ServerID() {
				t.Errorf("the leader %s is neither server", s.ID)
			}
		}
	}
	if leaders != 1 {
		t.Errorf("%d servers marked leader, want 1: %+v", leaders, st.Servers)
	}
	a.Close()
	b.Close()
	if st, err := SharedStatus(ctx, url, "", time.Minute); err != nil || st.Running || len(st.Servers) != 0 || st.PendingExports != 1 {
		t.Fatalf("status from the database after the servers stopped: %+v, %v; want none live and the one pending export", st, err)
	}

	empty := pg.NewDatabase(t)
	if _, err := SharedStatus(ctx, empty, "", time.Minute); err == nil || !strings.Contains(err.Error(), "no file system") {
		t.Fatalf("status of an empty database: %v; want no file system", err)
	}
	if _, err := SharedStatus(ctx, empty, "", time.Minute); err == nil {
		t.Fatal("the status of an empty database made a file system in it")
	}
}
