package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// flushBound is how long the flush tests give a flush of a few small
// files and one growing one.
const flushBound = 30 * time.Second

// `bucketfs flush` exports what was pending when it was asked for (README:
// it "waits until the leader has exported what was pending") and returns,
// even while a file is written on and on through another server: the
// writes that come after it are the next export's. A flush that waited for
// the export queue to be empty would wait as long as the writer writes.
func TestClusterFlushReturnsWhileAFileIsWrittenOn(t *testing.T) {
	c := startCluster(t, clusterOptions{exportDelay: 100 * time.Millisecond})
	ctx := context.Background()
	a := &nfsFS{label: "nfs-a", c: c.nfsA().nfs}
	s := &streamer{fs: a, path: "growing", pace: time.Millisecond}
	st, err := a.create(ctx, s.path)
	if err != nil {
		t.Fatal(err)
	}
	s.st = st
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(stop)
	}()
	stopped := false
	stopWriter := func() {
		if !stopped {
			stopped = true
			close(stop)
			<-done
		}
	}
	t.Cleanup(stopWriter)
	// A few MB, so that its exports take a while.
	waitFor(t, "the growing file to have 6 MB", func() bool { return s.progress() >= 100 })
	pending := []byte("written and closed before the flush\n")
	if err := a.writeFile(ctx, "pending", pending, true); err != nil {
		t.Fatal(err)
	}

	type result struct {
		err  error
		took time.Duration
	}
	flushed := make(chan result, 1)
	start := time.Now()
	go func() {
		err := c.nfsB().flush(5 * opDeadline)
		flushed <- result{err, time.Since(start)}
	}()
	select {
	case r := <-flushed:
		if r.err != nil {
			t.Fatalf("flush: %v", r.err)
		}
		t.Logf("the flush returned after %v while the file grew", r.took.Round(time.Millisecond))
	case <-time.After(flushBound):
		stopWriter()
		select {
		case r := <-flushed:
			t.Fatalf("the flush did not return within %v while a file was written on; it returned %v after the writer stopped (%v)",
				flushBound, (r.took - flushBound).Round(time.Millisecond), r.err)
		case <-time.After(opDeadline):
			t.Fatalf("the flush did not return within %v while a file was written on, nor %v after the writer stopped\n%s",
				flushBound, opDeadline, c.hangReport())
		}
	}
	if b, ok := c.object(ctx, "pending"); !ok || !bytes.Equal(b, pending) {
		t.Errorf("after the flush the bucket holds %q (present %v) for a file closed before it; want %q", b, ok, pending)
	}
}

// object reads key from the cluster's bucket; ok is false when it is not
// there.
func (c *cluster) object(ctx context.Context, key string) ([]byte, bool) {
	bodies, _, err := c.bucketObjects(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	b, ok := bodies[key]
	return b, ok
}
