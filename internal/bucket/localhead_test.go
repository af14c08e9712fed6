package bucket

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"bucketfs/internal/s3test"
)

// The embedded store answers bucketfs's HEADs in process
// (Config.LocalHead, s3local.Server.Head). The rule: Head answers exactly
// what it answers over HTTP (every field of ObjectInfo, and the kind of
// error), for objects with and without metadata, old versions, a key whose
// current version is a delete marker, a delete marker's own version, a
// directory marker, an implied directory, a key under a file, a missing
// key and a version id that does not exist; and through a prefix.
func TestAHeadAnsweredInProcessIsTheHeadOverHTTP(t *testing.T) {
	srv, bucket := s3test.NewBucket(t)
	ctx := context.Background()
	for _, prefix := range []string{"", "fs/"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			overHTTP := clientFor(t, srv, bucket, prefix, srv.Endpoint)
			inProcess, err := New(ctx, Config{Bucket: bucket, Prefix: prefix, Endpoint: srv.Endpoint, Region: srv.Region,
				AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, OpTimeout: 10 * time.Second, LocalHead: srv.Head})
			if err != nil {
				t.Fatal(err)
			}
			put := func(key string, body []byte, md map[string]string) ObjectInfo {
				t.Helper()
				o, err := overHTTP.Put(ctx, key, bytes.NewReader(body), int64(len(body)), PutOptions{Metadata: md})
				if err != nil {
					t.Fatal(err)
				}
				return o
			}
			first := put("f", []byte("first"), map[string]string{"mode": "33188", "uid": "1000", "Mixed-Case": "X"})
			put("f", []byte("second, longer"), map[string]string{"mode": "33261"})
			put("plain", []byte("no metadata"), nil)
			put("dir/", nil, nil)
			put("implied/child", []byte("c"), nil)
			put("gone", []byte("deleted"), nil)
			if err := overHTTP.Delete(ctx, "gone"); err != nil {
				t.Fatal(err)
			}
			versions, err := overHTTP.ListVersions(ctx, "", "", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			marker := ""
			for _, v := range versions.Versions {
				if v.Key == "gone" && v.IsDeleteMarker {
					marker = v.VersionID
				}
			}
			if marker == "" {
				t.Fatal("no delete marker of gone listed")
			}
			cases := []struct{ key, version string }{
				{"f", ""}, {"f", first.VersionID}, {"plain", ""}, {"dir/", ""}, {"implied", ""}, {"implied/", ""},
				{"implied/child", ""}, {"gone", ""}, {"gone", marker}, {"f/under", ""}, {"missing", ""},
				{"f", "01ARZ3NDEKTSV4RRFFQ69G5FAV"}, {"f", "not-a-version"},
			}
			before := inProcess.Stats()
			for _, tc := range cases {
				want, werr := overHTTP.Head(ctx, tc.key, tc.version)
				got, gerr := inProcess.Head(ctx, tc.key, tc.version)
				if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
					t.Errorf("%s@%q: in process %+v, over HTTP %+v", tc.key, tc.version, got, want)
				}
				if errors.Is(gerr, ErrNotFound) != errors.Is(werr, ErrNotFound) || (gerr == nil) != (werr == nil) {
					t.Errorf("%s@%q: in process error %v, over HTTP %v", tc.key, tc.version, gerr, werr)
				}
			}
			after := inProcess.Stats()
			if after.LocalHead-before.LocalHead < 8 {
				t.Errorf("only %d of %d HEADs were answered in process", after.LocalHead-before.LocalHead, len(cases))
			}
			t.Logf("%d HEADs in process, %d over HTTP", after.LocalHead-before.LocalHead, after.Head-before.Head)
		})
	}
}
