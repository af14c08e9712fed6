package keylock

import (
	"sync"
	"testing"
)

// Holders of overlapping key sets, given in any order and with repeats,
// exclude each other and never deadlock; the table empties afterwards.
func TestLockAllExcludesOverlappingSetsWithoutDeadlock(t *testing.T) {
	var tab Table[string]
	inside := 0
	var wg sync.WaitGroup
	for _, keys := range [][]string{{"a", "b"}, {"b", "a", "b"}, {"c", "a"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				unlock := LockAll(&tab, keys)
				inside++ // every set holds "a": a race here is a failure of -race and of the count
				unlock()
			}
		}()
	}
	wg.Wait()
	if inside != 6000 {
		t.Fatalf("%d entries counted, want 6000: two holders were inside at once", inside)
	}
	if len(tab.locks) != 0 {
		t.Fatalf("%d locks left in the table", len(tab.locks))
	}
}
