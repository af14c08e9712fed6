package locks

import (
	"errors"
	"slices"
	"syscall"
	"testing"
)

var (
	alice = Owner{ID: 1}
	bob   = Owner{ID: 2}
	carol = Owner{ID: 3}
)

func rd(o Owner, start, end uint64) Lock {
	return Lock{Start: start, End: end, Kind: Read, Owner: o}
}

func wr(o Owner, start, end uint64) Lock {
	return Lock{Start: start, End: end, Kind: Write, Owner: o}
}

func un(o Owner, start, end uint64) Lock {
	return Lock{Start: start, End: end, Kind: Unlock, Owner: o}
}

func TestOneOwnersLocksAreReplacedSplitAndMerged(t *testing.T) {
	tests := []struct {
		name  string
		steps []Lock
		want  []Lock
	}{
		{"a lock on a free range is held as asked",
			[]Lock{wr(alice, 10, 19)},
			[]Lock{wr(alice, 10, 19)}},
		{"touching locks of the same kind merge",
			[]Lock{rd(alice, 0, 9), rd(alice, 10, 19)},
			[]Lock{rd(alice, 0, 19)}},
		{"touching on the left merges too",
			[]Lock{rd(alice, 10, 19), rd(alice, 0, 9)},
			[]Lock{rd(alice, 0, 19)}},
		{"overlapping locks of the same kind merge",
			[]Lock{wr(alice, 0, 9), wr(alice, 5, 14)},
			[]Lock{wr(alice, 0, 14)}},
		{"a lock bridging two same-kind locks merges all three",
			[]Lock{rd(alice, 0, 4), rd(alice, 10, 14), rd(alice, 5, 9)},
			[]Lock{rd(alice, 0, 14)}},
		{"touching locks of different kinds stay apart",
			[]Lock{rd(alice, 0, 9), wr(alice, 10, 19)},
			[]Lock{rd(alice, 0, 9), wr(alice, 10, 19)}},
		{"a read inside a write lock splits it in three",
			[]Lock{wr(alice, 0, 99), rd(alice, 40, 59)},
			[]Lock{wr(alice, 0, 39), rd(alice, 40, 59), wr(alice, 60, 99)}},
		{"unlocking the middle splits a lock in two",
			[]Lock{rd(alice, 0, 99), un(alice, 40, 59)},
			[]Lock{rd(alice, 0, 39), rd(alice, 60, 99)}},
		{"unlocking the start trims a lock",
			[]Lock{wr(alice, 10, 19), un(alice, 0, 14)},
			[]Lock{wr(alice, 15, 19)}},
		{"unlocking a covering range frees everything",
			[]Lock{rd(alice, 0, 9), wr(alice, 20, 29), un(alice, 0, ToEOF)},
			nil},
		{"unlocking a free range changes nothing",
			[]Lock{wr(alice, 0, 9), un(alice, 20, 29)},
			[]Lock{wr(alice, 0, 9)}},
		{"a write over several reads replaces them",
			[]Lock{rd(alice, 0, 9), rd(alice, 20, 29), rd(alice, 40, 49), wr(alice, 5, 44)},
			[]Lock{rd(alice, 0, 4), wr(alice, 5, 44), rd(alice, 45, 49)}},
		{"relocking the same range converts it",
			[]Lock{rd(alice, 0, 9), wr(alice, 0, 9)},
			[]Lock{wr(alice, 0, 9)}},
		{"a lock to EOF can have its tail unlocked",
			[]Lock{wr(alice, 100, ToEOF), un(alice, 200, ToEOF)},
			[]Lock{wr(alice, 100, 199)}},
		{"a lock to EOF merges with one touching it",
			[]Lock{rd(alice, 100, ToEOF), rd(alice, 0, 99)},
			[]Lock{rd(alice, 0, ToEOF)}},
		{"a one-byte lock at the very end works",
			[]Lock{wr(alice, ToEOF, ToEOF), rd(alice, 0, ToEOF-1)},
			[]Lock{rd(alice, 0, ToEOF-1), wr(alice, ToEOF, ToEOF)}},
		{"other owners' read locks are left alone",
			[]Lock{rd(bob, 0, 99), rd(alice, 10, 19), un(alice, 0, 99)},
			[]Lock{rd(bob, 0, 99)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tab Table
			for _, l := range tt.steps {
				if err := tab.Set(7, l); err != nil {
					t.Fatalf("Set(%v): %v", l, err)
				}
			}
			if got := tab.Held(7); !slices.Equal(got, tt.want) {
				t.Errorf("Held = %v, want %v", got, tt.want)
			}
			if tt.want == nil && len(tab.inodes) != 0 {
				t.Errorf("inode with no locks is still in the table")
			}
		})
	}
}

func TestSetRejectsMalformedRequests(t *testing.T) {
	tests := []struct {
		name string
		l    Lock
	}{
		{"start after end", rd(alice, 10, 9)},
		{"zero kind", Lock{Start: 0, End: 9, Owner: alice}},
		{"unknown kind", Lock{Start: 0, End: 9, Kind: 9, Owner: alice}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tab Table
			err := tab.Set(1, tt.l)
			if !errors.Is(err, ErrInvalid) || !errors.Is(err, syscall.EINVAL) {
				t.Errorf("Set = %v, want ErrInvalid", err)
			}
		})
	}
}
