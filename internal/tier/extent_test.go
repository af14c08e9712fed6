package tier

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestExtentsAddCoalescesOverlappingAndAdjacentRanges(t *testing.T) {
	tests := []struct {
		name      string
		have      extents
		off, n    int64
		want      extents
		wantAdded int64
	}{
		{"into empty", nil, 10, 5, extents{{10, 5}}, 5},
		{"zero length is a no-op", extents{{0, 5}}, 7, 0, extents{{0, 5}}, 0},
		{"before, with a hole", extents{{10, 5}}, 0, 5, extents{{0, 5}, {10, 5}}, 5},
		{"after, with a hole", extents{{10, 5}}, 20, 5, extents{{10, 5}, {20, 5}}, 5},
		{"adjacent before merges", extents{{10, 5}}, 5, 5, extents{{5, 10}}, 5},
		{"adjacent after merges", extents{{10, 5}}, 15, 5, extents{{10, 10}}, 5},
		{"inside adds nothing", extents{{10, 10}}, 12, 3, extents{{10, 10}}, 0},
		{"overlapping start", extents{{10, 10}}, 5, 10, extents{{5, 15}}, 5},
		{"overlapping end", extents{{10, 10}}, 15, 10, extents{{10, 15}}, 5},
		{"covers several", extents{{0, 2}, {4, 2}, {8, 2}, {20, 2}}, 1, 8, extents{{0, 10}, {20, 2}}, 4},
		{"fills hole exactly", extents{{0, 5}, {10, 5}}, 5, 5, extents{{0, 15}}, 5},
		{"fills between, touching both", extents{{0, 5}, {10, 5}, {30, 1}}, 5, 5, extents{{0, 15}, {30, 1}}, 5},
		{"swallows everything", extents{{3, 1}, {5, 1}}, 0, 100, extents{{0, 100}}, 98},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := tt.have.clone()
			added := e.add(tt.off, tt.n)
			if !slices.Equal(e, tt.want) || added != tt.wantAdded {
				t.Errorf("add(%d, %d) to %v = %v, added %d; want %v, added %d", tt.off, tt.n, tt.have, e, added, tt.want, tt.wantAdded)
			}
			if !e.valid() {
				t.Errorf("result %v is not sorted and coalesced", e)
			}
		})
	}
}

func TestExtentsRemoveSplitsAndTrims(t *testing.T) {
	tests := []struct {
		name        string
		have        extents
		off, n      int64
		want        extents
		wantRemoved int64
	}{
		{"from empty", nil, 0, 10, nil, 0},
		{"in a hole", extents{{0, 5}, {10, 5}}, 5, 5, extents{{0, 5}, {10, 5}}, 0},
		{"middle splits", extents{{0, 10}}, 3, 4, extents{{0, 3}, {7, 3}}, 4},
		{"head", extents{{0, 10}}, 0, 4, extents{{4, 6}}, 4},
		{"tail", extents{{0, 10}}, 6, 100, extents{{0, 6}}, 4},
		{"whole range", extents{{0, 10}, {20, 5}}, 0, 10, extents{{20, 5}}, 10},
		{"across several", extents{{0, 5}, {10, 5}, {20, 5}, {30, 5}}, 3, 20, extents{{0, 3}, {23, 2}, {30, 5}}, 10},
		{"to the end of the file", extents{{0, 5}, {10, 5}}, 2, 1<<63 - 1 - 2, extents{{0, 2}}, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := tt.have.clone()
			removed := e.remove(tt.off, tt.n)
			if !slices.Equal(e, tt.want) || removed != tt.wantRemoved {
				t.Errorf("remove(%d, %d) from %v = %v, removed %d; want %v, removed %d", tt.off, tt.n, tt.have, e, removed, tt.want, tt.wantRemoved)
			}
		})
	}
}

func TestExtentsMissingListsHolesInOrder(t *testing.T) {
	have := extents{{10, 10}, {30, 10}, {40 + 5, 5}}
	tests := []struct {
		name   string
		off, n int64
		want   []Range
	}{
		{"all present", 12, 5, nil},
		{"exactly one range", 10, 10, nil},
		{"before everything", 0, 5, []Range{{0, 5}}},
		{"up to a range", 0, 15, []Range{{0, 10}}},
		{"hole between ranges", 15, 20, []Range{{20, 10}}},
		{"several holes", 0, 60, []Range{{0, 10}, {20, 10}, {40, 5}, {50, 10}}},
		{"after everything", 100, 10, []Range{{100, 10}}},
		{"empty request", 5, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := have.missing(tt.off, tt.n, nil)
			if !slices.Equal(got, tt.want) {
				t.Errorf("missing(%d, %d) = %v, want %v", tt.off, tt.n, got, tt.want)
			}
			if cov := have.covers(tt.off, tt.n); cov != (len(tt.want) == 0) {
				t.Errorf("covers(%d, %d) = %v, want %v", tt.off, tt.n, cov, len(tt.want) == 0)
			}
		})
	}
}

// TestExtentsAgreeWithABitmap drives random adds and removes against a byte
// map and checks every query after every step.
func TestExtentsAgreeWithABitmap(t *testing.T) {
	const size = 200
	rng := rand.New(rand.NewPCG(1, 2))
	var e extents
	var bits [size]bool
	for step := range 5000 {
		off := rng.Int64N(size)
		n := rng.Int64N(size - off + 1)
		var delta, want int64
		if rng.IntN(3) == 0 {
			delta = e.remove(off, n)
			for i := off; i < off+n; i++ {
				if bits[i] {
					want++
				}
				bits[i] = false
			}
		} else {
			delta = e.add(off, n)
			for i := off; i < off+n; i++ {
				if !bits[i] {
					want++
				}
				bits[i] = true
			}
		}
		if delta != want {
			t.Fatalf("step %d: changed %d bytes, want %d", step, delta, want)
		}
		if !e.valid() {
			t.Fatalf("step %d: %v not sorted and coalesced", step, e)
		}
		var total int64
		var wantMissing []Range
		for i := int64(0); i < size; i++ {
			if bits[i] {
				total++
				continue
			}
			if k := len(wantMissing); k > 0 && wantMissing[k-1].End() == i {
				wantMissing[k-1].Len++
			} else {
				wantMissing = append(wantMissing, Range{i, 1})
			}
		}
		if e.total() != total {
			t.Fatalf("step %d: total %d, want %d", step, e.total(), total)
		}
		if got := e.missing(0, size, nil); !slices.Equal(got, wantMissing) {
			t.Fatalf("step %d: missing %v, want %v", step, got, wantMissing)
		}
	}
}
