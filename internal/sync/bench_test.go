package sync

import (
	"context"
	"fmt"
	"testing"

	"bucketfs/internal/meta"
)

// BenchmarkFirstListing measures the first listing of a directory of
// objects written by another tool: one LIST page per 1,000 keys and a HEAD
// per object for its attributes, into a fresh namespace. The store is
// gofakes3 in process, so the figure is the client side's cost (the SDK
// and the importer) more than a real store's.
func BenchmarkFirstListing(b *testing.B) {
	const n = 5000
	c := fakeStore(b)
	for i := range n {
		put(b, c, fmt.Sprintf("d/f%05d", i), map[string]string{"mode": "0100640"})
	}
	ctx := context.Background()
	for b.Loop() {
		m := newMeta(b)
		im := NewImporter(m, c, ImporterConfig{})
		root, err := m.Get(ctx, meta.RootIno)
		if err != nil {
			b.Fatal(err)
		}
		if err := im.EnsureListed(ctx, &root); err != nil {
			b.Fatal(err)
		}
		d, err := m.Lookup(ctx, meta.RootIno, "d")
		if err != nil {
			b.Fatal(err)
		}
		if err := im.EnsureListed(ctx, &d); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/object")
}
