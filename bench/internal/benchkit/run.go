package benchkit

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// Run is one run of a benchmark program.
type Run struct {
	Name     string          // the program: it prefixes messages and names the temporary directory and results
	Date     string          // today, in the names of the results
	Dir, Out string          // -dir (parent of Base) and -out (the results)
	Ctx      context.Context // cancelled on SIGINT and SIGTERM
	Base     string          // the temporary directory under Dir, removed at the end
	Notes    []string        // printed under the table and written to the results
	undo     []func()        // cleanups, run last first
}

// New returns a run of the program name, dated today.
func New(name string) *Run {
	return &Run{Name: name, Date: time.Now().Format("2006-01-02")}
}

// Main runs run in a context that SIGINT and SIGTERM cancel, after making
// Dir, Out and paths absolute, Base and Out. The cleanups run when run
// returns or panics; an error from any of it is printed and exits 1.
func (r *Run) Main(run func() error, paths ...*string) {
	os.Unsetenv("AWS_CA_BUNDLE") // it breaks the bucket client
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	r.Ctx = ctx
	err := r.main(run, paths)
	stop()
	if err != nil {
		r.Exit(1, err)
	}
}

func (r *Run) main(run func() error, paths []*string) (err error) {
	defer r.Cleanup() // unmounts, stops servers and removes Base
	// The embedded store chdirs the process: make every path absolute first.
	for _, p := range append([]*string{&r.Dir, &r.Out}, paths...) {
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
	}
	if r.Base, err = os.MkdirTemp(r.Dir, r.Name+"-"); err != nil {
		return err
	}
	r.Defer(func() { os.RemoveAll(r.Base) })
	if err := os.MkdirAll(r.Out, 0o755); err != nil {
		return err
	}
	return run()
}

// Exit prints err after the program's name and exits with code.
func (r *Run) Exit(code int, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", r.Name, err)
	os.Exit(code)
}

// Defer adds a cleanup; Cleanup runs them last first.
func (r *Run) Defer(f func()) { r.undo = append(r.undo, f) }

// Cleanup runs the cleanups, last first, and forgets them.
func (r *Run) Cleanup() {
	for i := len(r.undo) - 1; i >= 0; i-- {
		r.undo[i]()
	}
	r.undo = nil
}

// Note adds a note, unless it is there already.
func (r *Run) Note(format string, args ...any) {
	if msg := fmt.Sprintf(format, args...); !slices.Contains(r.Notes, msg) {
		r.Notes = append(r.Notes, msg)
	}
}

// LogErr prints a failure that does not stop the run, if err is one.
func (r *Run) LogErr(what string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s: %v\n", r.Name, what, err)
	}
}

// DropCaches empties the page cache so that the next read comes from disk;
// if it cannot, that is noted.
func (r *Run) DropCaches() {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		r.Note("could not drop caches, so reads may be warm: %v", err)
	}
}
