package benchkit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Pattern is the data every program writes and checks: random bytes,
// repeated, with a period (1 MiB + 4093) that no I/O size divides.
type Pattern []byte

// NewPattern returns the pattern; it is the same in every run.
func NewPattern() Pattern {
	p := make(Pattern, 1<<20+4093)
	rand.NewChaCha8([32]byte{1}).Read(p)
	return p
}

// ReadAt fills p with the data at off: the pattern, repeated. It never
// fails, so the pattern is the source of multipart uploads too.
func (pat Pattern) ReadAt(p []byte, off int64) (int, error) {
	for n := 0; n < len(p); {
		n += copy(p[n:], pat[(off+int64(n))%int64(len(pat)):])
	}
	return len(p), nil
}

// Matches reports whether p is the pattern at off.
func (pat Pattern) Matches(p []byte, off int64) bool {
	for n := 0; n < len(p); {
		i := (off + int64(n)) % int64(len(pat))
		k := min(len(p)-n, len(pat)-int(i))
		if string(p[n:n+k]) != string(pat[i:int(i)+k]) {
			return false
		}
		n += k
	}
	return true
}

// ReaderFunc is a ReadAt function as an io.ReaderAt.
type ReaderFunc func(p []byte, off int64) (int, error)

func (f ReaderFunc) ReadAt(p []byte, off int64) (int, error) { return f(p, off) }

// Parallel calls fn for 0, step, 2*step ... below n, in that order, on
// workers goroutines, with a buffer of min(step, n-off) bytes each, until
// the first error, which it returns.
func Parallel(ctx context.Context, n, step int64, workers int, fn func(off int64, buf []byte) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	offs := make(chan int64)
	go func() {
		defer close(offs)
		for off := int64(0); off < n && ctx.Err() == nil; off += step {
			offs <- off
		}
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := make([]byte, step)
			for off := range offs {
				if ctx.Err() == nil {
					if err := fn(off, buf[:min(step, n-off)]); err != nil {
						cancel(err)
					}
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// Striped calls fn(i) for every i in [0, n) from workers goroutines, each
// taking every workers-th i; a goroutine stops at its first error. It
// returns the errors.
func Striped(workers, n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n && errs[w] == nil; i += workers {
				errs[w] = fn(i)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ParseSize parses a size flag such as 512MiB (B, KiB, MiB and GiB, or no
// unit); example is one in the error.
func ParseSize(s, example string) (int64, error) {
	num := strings.TrimRight(s, "KMGiB")
	unit := map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[s[len(num):]]
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || unit == 0 || n < 1 {
		return 0, fmt.Errorf("bad size %q (want e.g. %s)", s, example)
	}
	return n * unit, nil
}

// MiB is n bytes in MiB, for tables and notes.
func MiB(n int64) string { return fmt.Sprintf("%.4g MiB", float64(n)/(1<<20)) }

// Rate is n per second since start.
func Rate(n int64, start time.Time) float64 { return float64(n) / time.Since(start).Seconds() }

// Percentile is the nearest-rank percentile q (0 < q <= 1) of v.
func Percentile(v []float64, q float64) float64 {
	v = slices.Sorted(slices.Values(v))
	i := int(q*float64(len(v))+0.999999) - 1
	return v[max(0, min(i, len(v)-1))]
}
