package engine

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"bucketfs/internal/meta"
	"bucketfs/internal/s3test"
	"bucketfs/internal/vfs"
)

// Issue 24, item 6: a first copy of files into an empty bucket costs one
// S3 request per file exported, not a PUT, a LIST and a HEAD. On a store
// trusted with conditional writes (AWS S3, and the embedded store, which
// evaluates conditions under the key's lock: Open trusts it) the PUT's
// condition needs no listing to confirm it, and the store's event of an
// export's own upload needs no HEAD (it names the version the exporter
// made). The embedded store cannot run in this test binary beside the
// tests' shared one, which is the same store (s3local): its bucket stands
// in, trusted as Open trusts the embedded one, its events fed to the
// engine as the embedded store's are. Checked by the client's request
// counters after the events of every upload were applied.
func TestAnExportToATrustedStoreWithEventsCostsOneRequestPerFile(t *testing.T) {
	cfg := listenerConfig(t)
	cfg.TrustConditionalWrites = true
	e := startEngine(t, cfg)
	s3test.Forward(t, cfg.Bucket, e.StoreEvent)
	ctx := context.Background()
	dir, err := e.FS.Mkdir(ctx, vfs.Root, meta.RootIno, "copied", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	const files = 60
	for i := range files {
		parent := meta.RootIno
		if i%2 == 1 {
			parent = dir.Ino
		}
		_, f, err := e.FS.Create(ctx, vfs.Root, parent, fmt.Sprintf("f%02d", i), 0o644, uint32(os.O_RDWR))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(ctx, fmt.Appendf(nil, "file %d\n", i), 0); err != nil {
			t.Fatal(err)
		}
		f.Release(ctx)
	}
	before := e.Bucket.Stats()
	if err := e.Exporter.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	exported := e.Exporter.Stats().Exported
	if exported < files {
		t.Fatalf("%d exports after the flush of %d new files", exported, files)
	}
	// Every upload's event comes back to the importer: wait until all
	// were applied.
	deadline := time.Now().Add(30 * time.Second)
	for e.Importer.EventStats().Applied < files {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d uploads' events applied after 30 s", e.Importer.EventStats().Applied, files)
		}
		time.Sleep(10 * time.Millisecond) // polling the importer's counter
	}
	after := e.Bucket.Stats()
	put, list, head := after.Put-before.Put, after.List-before.List, after.Head-before.Head
	all := after.Requests() - before.Requests()
	t.Logf("%d exports: %d requests (PUT %d, LIST %d, HEAD %d); events applied without a HEAD: %d",
		exported, all, put, list, head, e.Importer.EventStats().Own)
	if float64(all) > 1.1*float64(exported) {
		t.Errorf("%d requests for %d exports (PUT %d, LIST %d, HEAD %d): more than 1.1 per export", all, exported, put, list, head)
	}
}

// Issue 24, item 6: opens that revalidate cost no HEAD where the store's
// events already say the key is unchanged (the embedded store's, which
// come before the writer's request is answered; the tests' shared store
// stands in, its events fed as the embedded store's are, and the importer
// told they are complete as Start tells it for the embedded store). The
// rule that must hold all the same: an open after a bucket-side write was
// answered reads that write. Rounds of a bucket-side overwrite, an open
// and a read, then opens with nothing changed, which must send no HEAD.
func TestOpensCoveredByTheStoresEventsSendNoHeadAndReadEveryWrite(t *testing.T) {
	cfg := listenerConfig(t)
	cfg.RevalidateTTL = time.Millisecond // every open compares, unless the events cover it
	e := startEngine(t, cfg)
	s3test.Forward(t, cfg.Bucket, e.StoreEvent)
	e.Importer.EventsComplete()
	ctx := context.Background()
	c := s3.New(s3.Options{BaseEndpoint: aws.String(cfg.Endpoint), Region: cfg.Region, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")})
	put := func(body string) {
		t.Helper()
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(cfg.Bucket), Key: aws.String("f"),
			Body: strings.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
	}
	read := func() string {
		t.Helper()
		a, err := e.FS.Lookup(ctx, vfs.Root, meta.RootIno, "f")
		if err != nil {
			t.Fatal(err)
		}
		h, err := e.FS.Open(ctx, vfs.Root, a.Ino, uint32(os.O_RDONLY))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		buf := make([]byte, 64)
		n, err := h.Read(ctx, buf, 0)
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		return string(buf[:n])
	}
	put("version 0")
	if got := read(); got != "version 0" {
		t.Fatalf("first read: %q", got)
	}
	for i := 1; i <= 30; i++ {
		want := fmt.Sprintf("version %d", i)
		put(want)
		if got := read(); got != want {
			t.Fatalf("round %d: an open after the bucket-side write was answered read %q, want %q", i, got, want)
		}
	}
	// The last write applied: opens now ask nothing of the store.
	deadline := time.Now().Add(30 * time.Second)
	for e.Importer.EventStats().Pending > 0 {
		if time.Now().After(deadline) {
			t.Fatal("events still pending after 30 s")
		}
		time.Sleep(10 * time.Millisecond) // polling the importer's queue
	}
	read() // compares once more if the last event's apply came after the last open
	before := e.Bucket.Stats().Head
	for range 20 {
		if got := read(); got != "version 30" {
			t.Fatalf("read %q with nothing changed", got)
		}
	}
	if heads := e.Bucket.Stats().Head - before; heads != 0 {
		t.Errorf("20 opens of a file the events say is unchanged sent %d HEADs", heads)
	}
}
