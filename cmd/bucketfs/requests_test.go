package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"bucketfs/internal/bucket"
)

// Issue 24, item 6, on the embedded store as `bucketfs mount` runs it: a
// first copy of files into the empty bucket costs one S3 request per file
// exported. The store is trusted with conditional writes (no listing
// confirms each PUT) and the echo of each upload in its events costs no
// HEAD; status counts those echoes.
func TestAFirstCopyIntoTheEmbeddedStoreCostsOnePutPerFile(t *testing.T) {
	p := newFS(t)
	p.start("--export-delay", "1h")
	type status struct {
		Exported  int64        `json:"exported"`
		Applied   int64        `json:"events_applied"`
		Own       int64        `json:"events_own_exports"`
		S3        bucket.Stats `json:"s3"`
		EventsNow int          `json:"events_pending"`
	}
	read := func() status {
		var st status
		if err := json.Unmarshal([]byte(p.run("status", "--json")), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	const files = 40
	if err := os.Mkdir(filepath.Join(p.mnt, "copy"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range files {
		if err := os.WriteFile(filepath.Join(p.mnt, "copy", fmt.Sprintf("f%02d", i)), fmt.Appendf(nil, "file %d\n", i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := read()
	p.run("flush")
	var after status
	waitFor(t, "the events of every upload applied", func() bool {
		after = read()
		return after.Applied-before.Applied >= files && after.EventsNow == 0
	})
	exported := after.Exported - before.Exported
	all := after.S3.Requests() - before.S3.Requests()
	t.Logf("%d exports: %d requests (PUT %d, LIST %d, HEAD %d); %d echoes of own exports",
		exported, all, after.S3.Put-before.S3.Put, after.S3.List-before.S3.List, after.S3.Head-before.S3.Head, after.Own-before.Own)
	if exported < files || float64(all) > 1.1*float64(exported) {
		t.Errorf("%d requests for %d exports of %d new files: want at most 1.1 per export", all, exported, files)
	}
}
