package bucket

import (
	"context"
	"testing"
)

// BenchmarkHead is one HeadObject against the embedded versitygw store on
// loopback: the unit of a first listing, which asks for each object's
// attributes. Both sides run in this process, so it counts the client's and
// the store's CPU alike.
func BenchmarkHead(b *testing.B) {
	c := newTestClient(b, "")
	put(b, c, "obj", []byte("x"), PutOptions{Metadata: map[string]string{"mode": "0100644"}})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Head(ctx, "obj", ""); err != nil {
			b.Fatal(err)
		}
	}
}
