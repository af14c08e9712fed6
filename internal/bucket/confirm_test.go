package bucket

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"bucketfs/internal/s3test"
)

// raceProxy puts a proxy in front of the shared store that does to the
// first conditional write of key what MinIO did under a race: the other
// client's write of key (other) lands just before it, or with after just
// after it, and the store gets the conditional write without its
// condition, so that it acknowledges both. It returns a client through
// the proxy, and the other client's write once it has landed.
func raceProxy(t *testing.T, key string, after bool, other func(c *Client) ObjectInfo) (*Client, *Client, *ObjectInfo) {
	t.Helper()
	srv, bucket := s3test.NewBucket(t)
	direct := clientFor(t, srv, bucket, "", srv.Endpoint)
	theirs := new(ObjectInfo)
	var raced atomic.Bool
	proxy := s3test.NewProxy(t, srv, func(p *s3test.Proxy, w http.ResponseWriter, r *http.Request) bool {
		conditional := r.Header.Get("If-None-Match") != "" || r.Header.Get("If-Match") != ""
		if s3test.ObjectKey(r) != key || !conditional || !raced.CompareAndSwap(false, true) {
			return false
		}
		if !after {
			*theirs = other(direct)
		}
		if err := p.Strip(r, "If-None-Match", "If-Match", "X-Amz-Copy-Source-If-Match"); err != nil {
			t.Error(err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return true
		}
		p.ForwardThen(w, r, func() {
			if after {
				*theirs = other(direct)
			}
		})
		return true
	})
	t.Cleanup(func() {
		if !raced.Load() {
			t.Error("the proxy never saw a conditional write of " + key)
		}
	})
	return clientFor(t, srv, bucket, "", proxy.URL), direct, theirs
}

// Issue 21, corner 5, at the client: a conditional write (PUT, multipart
// completion, copy; If-None-Match or If-Match) that the store acknowledged
// while another write of the key landed next to it fails as a failed
// condition, and the other write is current, whichever the store put
// first; the version the write made is deleted again where it would hide
// the other write.
func TestAConditionalWriteAcknowledgedBesideAnotherWriteFailsAndTheOtherIsCurrent(t *testing.T) {
	body := []byte("ours")
	writes := []struct {
		name  string
		setup func(t *testing.T, c *Client) PutOptions
		write func(c *Client, opt PutOptions) (ObjectInfo, error)
	}{
		{"a new object's PUT", func(*testing.T, *Client) PutOptions { return PutOptions{IfNoneMatch: true} },
			func(c *Client, opt PutOptions) (ObjectInfo, error) {
				return c.Put(context.Background(), "k", bytes.NewReader(body), int64(len(body)), opt)
			}},
		{"an overwrite's PUT", func(t *testing.T, c *Client) PutOptions {
			old := put(t, c, "k", []byte("the version we saw"), PutOptions{})
			return PutOptions{IfMatch: old.ETag, IfMatchVersion: old.VersionID}
		}, func(c *Client, opt PutOptions) (ObjectInfo, error) {
			return c.Put(context.Background(), "k", bytes.NewReader(body), int64(len(body)), opt)
		}},
		{"a multipart upload's completion", func(*testing.T, *Client) PutOptions { return PutOptions{IfNoneMatch: true} },
			func(c *Client, opt PutOptions) (ObjectInfo, error) {
				return c.PutParts(context.Background(), "k", []Part{{Off: 0, Len: int64(len(body)), Src: bytes.NewReader(body)}}, 1, opt)
			}},
		{"a copy", func(t *testing.T, c *Client) PutOptions {
			put(t, c, "src", body, PutOptions{})
			return PutOptions{IfNoneMatch: true}
		}, func(c *Client, opt PutOptions) (ObjectInfo, error) {
			return c.Copy(context.Background(), "k", "src", "", opt)
		}},
	}
	for _, w := range writes {
		for _, after := range []bool{false, true} {
			name := w.name + ", the other write landing just before it"
			if after {
				name = w.name + ", the other write landing just after it"
			}
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				c, direct, theirs := raceProxy(t, "k", after, func(c *Client) ObjectInfo {
					info, err := c.Put(ctx, "k", strings.NewReader("theirs"), 6, PutOptions{})
					if err != nil {
						t.Errorf("the other write: %v", err)
					}
					return info
				})
				opt := w.setup(t, direct)
				_, err := w.write(c, opt)
				if !errors.Is(err, ErrInterleaved) || !errors.Is(err, ErrPrecondition) {
					t.Fatalf("the write: %v, want ErrInterleaved, an ErrPrecondition", err)
				}
				cur, err := direct.Head(ctx, "k", "")
				if err != nil || cur.VersionID != theirs.VersionID {
					t.Fatalf("current: %+v (%v), want the other write's version %s", cur, err, theirs.VersionID)
				}
				vl, err := direct.ListVersions(ctx, "", "", "", 0)
				if err != nil {
					t.Fatal(err)
				}
				ours := 0
				for _, v := range vl.Versions {
					if v.Key == "k" && v.Size == int64(len(body)) {
						ours++
					}
				}
				// Before: ours hid theirs and is gone. After: ours is an
				// older version, and stays.
				if want := map[bool]int{false: 0, true: 1}[after]; ours != want {
					t.Errorf("versions of ours left: %d, want %d (%+v)", ours, want, vl.Versions)
				}
			})
		}
	}
}

// AWS S3 is the one store trusted with conditional writes; every other
// endpoint gets them confirmed, unless the configuration says to trust it.
func TestOnlyAWSS3IsTrustedWithConditionalWritesByDefault(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	for _, tc := range []struct {
		endpoint string
		trust    bool
		confirms bool
	}{
		{"", false, false},
		{"https://s3.eu-west-1.amazonaws.com", false, false},
		{"https://s3.cn-north-1.amazonaws.com.cn", false, false},
		{"http://127.0.0.1:9000", false, true},
		{"https://minio.example.com", false, true},
		{"https://amazonaws.com.example.org", false, true},
		{"http://127.0.0.1:9000", true, false},
	} {
		c, err := New(context.Background(), Config{Bucket: "b", Endpoint: tc.endpoint, Region: "us-east-1",
			AccessKey: "a", SecretKey: "s", TrustConditionalWrites: tc.trust})
		if err != nil {
			t.Fatal(err)
		}
		if c.ConfirmsWrites() != tc.confirms {
			t.Errorf("endpoint %q, trust %v: confirms writes %v, want %v", tc.endpoint, tc.trust, c.ConfirmsWrites(), tc.confirms)
		}
	}
}

// Issue 21, corner 7, at the client: where the store honours If-Match on
// DELETE (versitygw does), DeleteCurrent of a key that changed since the
// look is refused without writing a delete marker; a newer version with
// the very same bytes (the same ETag) is still never hidden; and a key
// the bucket deleted meanwhile is no change to keep.
func TestDeleteCurrentWritesNoMarkerForAKeyThatChangedWhereTheStoreHonoursIfMatch(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, "")
	ctx := context.Background()
	if _, err := c.ProbeConditionalWrites(ctx, ".probe"); err != nil {
		t.Fatal(err)
	}
	if !c.ConditionalDeletes() {
		t.Fatal("the probe found that the embedded store ignores If-Match on DELETE")
	}
	// A marker written and taken back leaves no trace in the versions;
	// the store's events tell.
	events := s3test.Events(t, c.Name())
	removals := func(key string) (n int) {
		for _, ev := range events.All() {
			if ev.Key == key && strings.Contains(ev.Name, "ObjectRemoved") {
				n++
			}
		}
		return n
	}
	seen := put(t, c, "changed", []byte("v1"), PutOptions{})
	newer := put(t, c, "changed", []byte("v2"), PutOptions{})
	if kept, err := c.DeleteCurrent(ctx, "changed", seen); err != nil || !kept {
		t.Fatalf("DeleteCurrent over a newer version: kept %v, %v", kept, err)
	}
	if h, err := c.Head(ctx, "changed", ""); err != nil || h.VersionID != newer.VersionID {
		t.Fatalf("after DeleteCurrent the newer version is not current: %+v, %v", h, err)
	}
	if n := removals("changed"); n != 0 {
		t.Errorf("the store reported %d removals of a key that changed: a delete marker was written", n)
	}

	seen = put(t, c, "same", []byte("v1"), PutOptions{})
	newer = put(t, c, "same", []byte("v1"), PutOptions{})
	if kept, err := c.DeleteCurrent(ctx, "same", seen); err != nil || !kept {
		t.Fatalf("DeleteCurrent over a newer version with the same bytes: kept %v, %v", kept, err)
	}
	if h, err := c.Head(ctx, "same", ""); err != nil || h.VersionID != newer.VersionID {
		t.Fatalf("after DeleteCurrent the newer version with the same bytes is not current: %+v, %v", h, err)
	}

	seen = put(t, c, "gone", []byte("v1"), PutOptions{})
	if err := c.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if kept, err := c.DeleteCurrent(ctx, "gone", seen); err != nil || kept {
		t.Fatalf("DeleteCurrent of a key the bucket deleted meanwhile: kept %v, %v", kept, err)
	}
	if _, err := c.Head(ctx, "gone", ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after DeleteCurrent: %v, want not found", err)
	}
}

// A crash can leave an upload of the writer's own behind that its records
// do not name: the next conditional write then follows a version with the
// ETag its condition named but another version id. Where that version is
// the writer's own (PutOptions.Ours), no other writer landed between: the
// write stands. A version with the same bytes that is not the writer's
// own is still another writer's, and the write is taken back. (The crash
// checker found the first case: an export refused for ever after a kill
// -9 in the middle of an upload.)
func TestAConditionalWriteAfterAnUnrecordedUploadOfTheWritersOwnStands(t *testing.T) {
	srv, bucket := s3test.NewBucket(t)
	c := clientFor(t, srv, bucket, "", srv.Endpoint)
	if !c.ConfirmsWrites() {
		t.Fatal("the embedded store's conditional writes are trusted: nothing to test")
	}
	ctx := context.Background()
	body := []byte("the same bytes twice")
	for _, ours := range []bool{true, false} {
		key := "f-ours"
		if !ours {
			key = "f-theirs"
		}
		first, err := c.Put(ctx, key, bytes.NewReader(body), int64(len(body)), PutOptions{Metadata: map[string]string{"who": "us"}})
		if err != nil {
			t.Fatal(err)
		}
		who := "us"
		if !ours {
			who = "them"
		}
		// The upload the records do not name: same bytes, a new version.
		if _, err := c.Put(ctx, key, bytes.NewReader(body), int64(len(body)), PutOptions{Metadata: map[string]string{"who": who}}); err != nil {
			t.Fatal(err)
		}
		next := []byte("the next state")
		got, err := c.Put(ctx, key, bytes.NewReader(next), int64(len(next)), PutOptions{
			IfMatch: first.ETag, IfMatchVersion: first.VersionID, Metadata: map[string]string{"who": "us"},
			Ours: func(md map[string]string) bool { return md["who"] == "us" }})
		switch {
		case ours && err != nil:
			t.Errorf("after an upload of the writer's own: %v", err)
		case !ours && !errors.Is(err, ErrInterleaved):
			t.Errorf("after another writer's upload of the same bytes: %v (version %s), want ErrInterleaved", err, got.VersionID)
		}
	}
}
