package readahead

import (
	"math"
	"slices"
	"sort"
)

// span is the byte range [off, end).
type span struct{ off, end int64 }

// spans is a set of bytes: spans sorted by offset, neither overlapping nor
// touching.
type spans []span

// add puts the bytes [off, end) in the set.
func (s *spans) add(off, end int64) {
	set := *s
	i := sort.Search(len(set), func(k int) bool { return set[k].end >= off })
	j := i
	for ; j < len(set) && set[j].off <= end; j++ {
		off, end = min(off, set[j].off), max(end, set[j].end)
	}
	*s = slices.Replace(set, i, j, span{off, end})
}

// overlaps reports whether a byte of [off, end) is in the set.
func (s spans) overlaps(off, end int64) bool {
	i := s.search(off)
	return i < len(s) && s[i].off < end
}

// covers reports whether every byte of [off, end) is in the set.
func (s spans) covers(off, end int64) bool {
	i := s.search(off)
	return i < len(s) && s[i].off <= off && s[i].end >= end
}

// from returns the first byte of the set at or after off, or MaxInt64.
func (s spans) from(off int64) int64 {
	i := s.search(off)
	if i == len(s) {
		return math.MaxInt64
	}
	return max(s[i].off, off)
}

// skip returns the first byte at or after off that is not in the set.
func (s spans) skip(off int64) int64 {
	if i := s.search(off); i < len(s) && s[i].off <= off {
		return s[i].end
	}
	return off
}

// search returns the index of the first span that ends after off.
func (s spans) search(off int64) int {
	return sort.Search(len(s), func(k int) bool { return s[k].end > off })
}
