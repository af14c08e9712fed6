package bucket

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

func TestTheEmbeddedStoreHonoursConditionalWrites(t *testing.T) {
	c := newTestClient(t, "")
	ok, err := c.ProbeConditionalWrites(context.Background(), ".probe")
	if err != nil || !ok {
		t.Fatalf("probe: supported=%v err=%v", ok, err)
	}
	if c.headBeforeWrite.Load() {
		t.Fatal("fallback switched on for a store that honours conditions")
	}
	// The probe leaves no trace: no version, no delete marker, and so no
	// prefix that a listing of the bucket would show (issue 10, item 1).
	vl, err := c.ListVersions(context.Background(), ".probe/", "", "", 0)
	if err != nil || len(vl.Versions) != 0 {
		t.Fatalf("versions left by the probe: %+v, %v", vl.Versions, err)
	}
	l, err := c.List(context.Background(), "", "", 0)
	if err != nil || len(l.Prefixes) != 0 {
		t.Fatalf("prefixes after the probe: %q, %v", l.Prefixes, err)
	}
}

// A store that ignores If-Match and If-None-Match cannot be run here, so
// this test switches the fallback on by hand against the real store: the
// HEAD comparison alone must refuse stale writes.
func TestTheHeadFallbackRefusesStaleWrites(t *testing.T) {
	c := newTestClient(t, "")
	c.headBeforeWrite.Store(true)
	ctx := context.Background()
	first := put(t, c, "k", []byte("one"), PutOptions{})
	if _, err := c.Put(ctx, "k", bytes.NewReader([]byte("x")), 1, PutOptions{IfNoneMatch: true}); !errors.Is(err, ErrPrecondition) {
		t.Fatalf("If-None-Match on an existing key: %v", err)
	}
	put(t, c, "k", []byte("two"), PutOptions{IfMatch: first.ETag})
	if _, err := c.Put(ctx, "k", bytes.NewReader([]byte("x")), 1, PutOptions{IfMatch: first.ETag}); !errors.Is(err, ErrPrecondition) {
		t.Fatalf("stale If-Match: %v", err)
	}
	if _, err := c.Copy(ctx, "k", "k", "", PutOptions{IfMatch: first.ETag, Metadata: map[string]string{"a": "b"}}); !errors.Is(err, ErrPrecondition) {
		t.Fatalf("stale If-Match on a copy: %v", err)
	}
	if _, err := c.Put(ctx, "new", bytes.NewReader([]byte("x")), 1, PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("If-None-Match on a new key: %v", err)
	}
}
