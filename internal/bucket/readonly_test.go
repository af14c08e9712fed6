package bucket

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"bucketfs/internal/s3test"
)

// A read-only client refuses every write before it reaches the store, and
// reads as ever (issue 13: --read-only exports nothing).
func TestAReadOnlyClientWritesNothing(t *testing.T) {
	ctx := context.Background()
	srv, name := s3test.NewBucket(t)
	rw := clientFor(t, srv, name, "", srv.Endpoint)
	obj := put(t, rw, "kept", []byte("v1"), PutOptions{})
	ro, err := New(ctx, Config{Bucket: name, Endpoint: srv.Endpoint, Region: srv.Region,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, OpTimeout: 10 * time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ro.Close)
	part := Part{Off: 0, Len: 1, Src: bytes.NewReader([]byte("x"))}
	for what, write := range map[string]func() error{
		"put": func() error {
			_, err := ro.Put(ctx, "new", bytes.NewReader([]byte("x")), 1, PutOptions{})
			return err
		},
		"put parts": func() error { _, err := ro.PutParts(ctx, "new", []Part{part}, 1, PutOptions{}); return err },
		"copy":      func() error { _, err := ro.Copy(ctx, "copied", "kept", "", PutOptions{}); return err },
		"delete":    func() error { return ro.Delete(ctx, "kept") },
		"delete current": func() error {
			_, err := ro.DeleteCurrent(ctx, "kept", obj)
			return err
		},
		"abort upload": func() error { return ro.AbortUpload(ctx, "kept", "some-upload") },
		"probe":        func() error { _, err := ro.ProbeConditionalWrites(ctx, "probe"); return err },
	} {
		if err := write(); !errors.Is(err, ErrReadOnly) {
			t.Errorf("%s on a read-only client: %v, want ErrReadOnly", what, err)
		}
	}
	vs, err := ro.ListVersions(ctx, "", "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs.Versions) != 1 || vs.Versions[0].Key != "kept" || vs.Versions[0].VersionID != obj.VersionID {
		t.Fatalf("the bucket holds %+v, want only the version put before", vs.Versions)
	}
}
