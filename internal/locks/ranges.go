package locks

import (
	"cmp"
	"slices"
)

// apply returns records with req applied to the locks of req.Owner: their
// part inside req's range is replaced by req (or dropped, for Unlock), and
// req merges with the owner's same-kind locks that overlap or touch it.
// Other owners' locks are kept as they are. records must be sorted by
// compareLocks and hold, per owner, non-overlapping locks whose same-kind
// neighbours do not touch; the result is sorted and keeps that invariant.
// records is not modified. Returns nil when no locks remain.
func apply(records []Lock, req Lock) []Lock {
	out := make([]Lock, 0, len(records)+2)
	merged := req
	for _, x := range records {
		if x.Owner != req.Owner || !(x.overlaps(req) || x.touches(req)) {
			out = append(out, x)
			continue
		}
		if req.Kind != Unlock && x.Kind == req.Kind {
			// Same kind: absorb x. x does not overlap the owner's other
			// locks, so growing merged to cover it cannot make it overlap
			// them either.
			merged.Start = min(merged.Start, x.Start)
			merged.End = max(merged.End, x.End)
			continue
		}
		if !x.overlaps(req) {
			// Touching but of another kind: both stay.
			out = append(out, x)
			continue
		}
		if x.Start < req.Start {
			left := x
			left.End = req.Start - 1
			out = append(out, left)
		}
		if x.End > req.End {
			right := x
			right.Start = req.End + 1
			out = append(out, right)
		}
	}
	if req.Kind != Unlock {
		out = append(out, merged)
	}
	if len(out) == 0 {
		return nil
	}
	slices.SortFunc(out, compareLocks)
	return out
}

// compareLocks orders locks by start, then end, then owner, so that the
// first conflicting lock found by a scan is the one lowest in the file.
func compareLocks(a, b Lock) int {
	return cmp.Or(
		cmp.Compare(a.Start, b.Start),
		cmp.Compare(a.End, b.End),
		cmp.Compare(a.Owner.Client, b.Owner.Client),
		cmp.Compare(a.Owner.ID, b.Owner.ID),
	)
}

// firstConflict returns the lowest lock in records that blocks req.
func firstConflict(records []Lock, req Lock) (Lock, bool) {
	for _, x := range records {
		if x.Start > req.End {
			break
		}
		if req.conflicts(x) {
			return x, true
		}
	}
	return Lock{}, false
}

// without returns records minus the locks for which drop is true, reusing
// records' backing array, and whether anything was dropped. Returns nil when
// no locks remain.
func without(records []Lock, drop func(Lock) bool) ([]Lock, bool) {
	kept := records[:0]
	for _, x := range records {
		if !drop(x) {
			kept = append(kept, x)
		}
	}
	changed := len(kept) != len(records)
	clear(records[len(kept):])
	if len(kept) == 0 {
		return nil, changed
	}
	return kept, changed
}
