package engine

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
	"unicode"

	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/meta"
	bsync "bucketfs/internal/sync"
	"bucketfs/internal/vfs"
)

// jsonKeys calls fn with the path of every object key in v, a decoded
// JSON value.
func jsonKeys(v any, path string, fn func(path, key string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			fn(path, k)
			jsonKeys(x, path+"."+k, fn)
		}
	case []any:
		for _, x := range v {
			jsonKeys(x, path+"[]", fn)
		}
	}
}

func TestEveryKeyOfTheStatusJSONIsSnakeCase(t *testing.T) {
	e := openEngine(t)
	st, err := e.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The fields left out when empty, filled so that their keys show.
	st.ImportFailureKeys = []string{"bad//key"}
	st.Listings = []bsync.ListingProgress{{Dir: 2, Prefix: "big/", Keys: 1000, RunningS: 1.5}}
	st.LastPoll, st.LastCheckpoint = time.Now(), time.Now()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	n := 0
	jsonKeys(v, "", func(path, key string) {
		n++
		if strings.IndexFunc(key, unicode.IsUpper) >= 0 || strings.ContainsAny(key, " -") {
			t.Errorf("status JSON key %s.%s is not snake_case", path, key)
		}
	})
	for _, want := range []string{`"s3":{"get":`, `"bytes_written":`, `"listings_in_progress":[{"dir":2`, `"data":{"read_tier_bytes":`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("status JSON lacks %s:\n%s", want, b)
		}
	}
	if n < 40 {
		t.Errorf("only %d keys walked in %s", n, b)
	}
}

// Before the s3 block had snake_case names, status.json held Go's field
// names there; a stopped file system's status still shows those figures.
func TestTheStatusOfAStoppedFileSystemReadsAStatusFileOfAnEarlierVersion(t *testing.T) {
	testkv.SkipOnPostgres(t, "the status of a stopped file system is read from the Pebble store in its state directory")
	cfg := listenerConfig(t)
	cfg.MetricsListen = ""
	e := startEngine(t, cfg)
	ctx := context.Background()
	_, f, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "q", 0o644, uint32(os.O_RDWR))
	if err != nil {
		t.Fatal(err)
	}
	f.Write(ctx, []byte("12345"), 0)
	f.Release(ctx)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	old := `{"running": false, "bucket": "s3://old", "exported": 7, "exported_bytes": 70,
		"s3": {"Get": 1, "Put": 2, "List": 3, "Head": 4, "Copy": 5, "Delete": 6, "Multipart": 7, "Other": 8,
			"Retries": 9, "BytesRead": 1000, "BytesWritten": 2000},
		"data": {"read_tier_bytes": 5, "read_direct_bytes": 6, "write_bytes": 7, "metadata_operations": 8}}`
	if err := os.WriteFile(statusFile(cfg.StateDir), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := OfflineStatus(ctx, cfg.StateDir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s3 := st.S3
	if st.Bucket != "s3://old" || st.Exported != 7 || s3.Get != 1 || s3.Multipart != 7 || s3.Retries != 9 ||
		s3.BytesRead != 1000 || s3.BytesWritten != 2000 || st.Data.WriteBytes != 7 {
		t.Errorf("an earlier version's status.json read as %+v", st)
	}
	if st.PendingExports != 1 || st.PendingBytes != 5 {
		t.Errorf("the queue read afresh: %d pending (%d bytes), want 1 (5)", st.PendingExports, st.PendingBytes)
	}
}
