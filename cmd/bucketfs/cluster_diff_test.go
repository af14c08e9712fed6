package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clusterSeedEnv replays a seed of TestClusterDifferential.
const clusterSeedEnv = "BUCKETFS_CLUSTER_SEED"

// clusterOps is how many operations one run of the differential test makes.
const clusterOps = 800

// clusterSeed is the seed of a randomised cluster test: from the
// environment when replaying, else new. The test logs it.
func clusterSeed(t *testing.T, name string) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(clusterSeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: not a number", clusterSeedEnv, s)
		}
		seed = v
	}
	t.Logf("seed %d; replay with %s=%d go test ./cmd/bucketfs -run '^%s$' -count=1", seed, clusterSeedEnv, seed, name)
	return seed
}

// The three servers are one file system: a seeded run of operations
// spread over them (creates and writes, reads, mkdir, renames of files and
// directories, unlink, rmdir, link, truncate, chmod, stat, readdir) gets
// from every server the answer a model of the file system gives, one
// operation after another; the tree read through every server equals the
// model at the end; and once the servers have exported, so does the
// bucket. The NFS client caches nothing, so its answers must be exact at
// once. The FUSE mount's kernel caches names and attributes: before an
// operation through it, what the others changed since its last operation
// must show through it within fuseStaleness (the README says 1 s), and
// then its answer must be exact too.
func TestClusterDifferential(t *testing.T) {
	seed := clusterSeed(t, "TestClusterDifferential")
	old := syscall.Umask(0o022) // the modes of FUSE creates are the model's
	t.Cleanup(func() { syscall.Umask(old) })
	c := startCluster(t, clusterOptions{exportDelay: 200 * time.Millisecond})
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	fss := c.clients()
	m := newModel()
	var history []string
	fail := func(format string, args ...any) {
		t.Helper()
		from := max(0, len(history)-25)
		t.Fatalf("%s\nlast operations:\n  %s\nseed %d", fmt.Sprintf(format, args...),
			strings.Join(history[from:], "\n  "), seed)
	}
	// stale holds the paths changed through the NFS servers since the last
	// operation through FUSE.
	stale := map[string]bool{}
	var maxSettle time.Duration
	done, failed := map[string]int{}, map[string]int{} // by kind, for the log
	start := time.Now()
	for i := 0; i < clusterOps; i++ {
		o := randomOp(rng, m, i)
		fs := fss[o.server]
		nfs := !isFUSE(fs)
		history = append(history, fmt.Sprintf("%d %s: %s", i, fs.name(), o))
		if !nfs && len(stale) > 0 {
			took, diff := settleFUSE(fs, m, stale)
			if diff != "" {
				fail("the FUSE mount still differs from the model %v after changes through the NFS servers: %s", took, diff)
			}
			maxSettle = max(maxSettle, took)
			clear(stale)
		}
		want := m.expect(o, nfs)
		got, err := bounded(opDeadline, func(ctx context.Context) (any, error) { return runOp(ctx, fs, o) })
		if errors.Is(err, errHung) {
			fail("operation %d (%s through %s): %v", i, o, fs.name(), err)
		}
		var errno syscall.Errno
		switch {
		case len(want) == 0 && err != nil:
			fail("operation %d (%s through %s) failed: %v; the model says it succeeds", i, o, fs.name(), err)
		case len(want) > 0 && err == nil:
			fail("operation %d (%s through %s) succeeded; the model says it fails with one of %v", i, o, fs.name(), want)
		case len(want) > 0 && (!errors.As(err, &errno) || !slices.Contains(want, errno)):
			fail("operation %d (%s through %s) failed with %v; the model says one of %v", i, o, fs.name(), err, want)
		case len(want) > 0:
			history[len(history)-1] += " -> " + errno.Error()
			failed[o.kind]++
			continue
		}
		done[o.kind]++
		if d := checkAnswer(m, o, got); d != "" {
			fail("operation %d (%s through %s): %s", i, o, fs.name(), d)
		}
		if nfs && changes(o.kind) {
			for _, p := range touched(m, o) {
				stale[p] = true
			}
		}
		m.apply(o, nfs)
		if nfs && changes(o.kind) {
			for _, p := range touched(m, o) {
				stale[p] = true
			}
		}
	}
	t.Logf("%d operations in %v; FUSE showed the NFS servers' changes within %v at most", clusterOps,
		time.Since(start).Round(time.Millisecond), maxSettle.Round(time.Millisecond))
	t.Logf("succeeded %v; failed as the model said %v; the tree ends with %d names", done, failed, len(m.nodes))

	// The whole tree through every server.
	for _, fs := range fss {
		deadline := time.Now().Add(fuseStaleness)
		for {
			type tree struct {
				infos map[string]fileInfo
				datas map[string][]byte
			}
			tr, err := bounded(opDeadline, func(ctx context.Context) (tree, error) {
				infos, datas, err := walk(ctx, fs)
				return tree{infos, datas}, err
			})
			if err != nil {
				fail("walk through %s: %v", fs.name(), err)
			}
			d := m.diffTree(tr.infos, tr.datas)
			if d == "" {
				break
			}
			if !isFUSE(fs) || time.Now().After(deadline) {
				fail("the tree through %s differs from the model: %s", fs.name(), d)
			}
			time.Sleep(20 * time.Millisecond) // polling the kernel's caches, which nothing signals
		}
	}

	// The bucket, once everything is exported.
	flushStart := time.Now()
	if err := c.nfsB().flush(opDeadline); err != nil {
		t.Fatalf("flush through nfs-b: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), opDeadline)
		bodies, mds, err := c.bucketObjects(ctx)
		cancel()
		if err != nil {
			t.Fatalf("read the bucket: %v", err)
		}
		d := diffBucket(m, bodies, mds)
		if d == "" {
			break
		}
		if time.Now().After(deadline) {
			fail("30 s after the flush returned the bucket still differs from the model: %s", d)
		}
		time.Sleep(100 * time.Millisecond) // polling the bucket
	}
	t.Logf("the bucket equals the model %v after the flush began", time.Since(flushStart).Round(time.Millisecond))
}

// changes reports whether an operation of kind k changes the file system.
func changes(k string) bool {
	switch k {
	case "read", "stat", "readdir":
		return false
	}
	return true
}

// touched lists the paths whose state o changes: its paths and, for a
// directory, everything under them.
func touched(m *fsModel, o op) []string {
	var out []string
	for _, p := range []string{o.a, o.b} {
		if p == "" {
			continue
		}
		out = append(out, p, parentOf(p))
		if n := m.nodes[p]; n != nil && n.dir {
			out = append(out, m.subtree(p)...)
		}
	}
	return out
}

// settleFUSE waits until every stale path shows through the FUSE mount as
// the model has it (its stat, a file's bytes, a directory's names), for
// at most fuseStaleness; it returns how long that took and, if it never
// did, the last difference.
func settleFUSE(fs clientFS, m *fsModel, stale map[string]bool) (time.Duration, string) {
	start := time.Now()
	paths := make([]string, 0, len(stale))
	for p := range stale {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for {
		diff := ""
		for _, p := range paths {
			if diff = fuseDiff(fs, m, p); diff != "" {
				break
			}
		}
		if diff == "" || time.Since(start) > fuseStaleness {
			return time.Since(start), diff
		}
		time.Sleep(10 * time.Millisecond) // polling the kernel's caches, which nothing signals
	}
}

// fuseDiff describes how p through fs differs from the model; "" if not.
func fuseDiff(fs clientFS, m *fsModel, p string) string {
	ctx := context.Background()
	if p != "" {
		fi, err := fs.stat(ctx, p)
		want := m.lookupErr(p)
		switch {
		case want != 0 && !errors.Is(err, want):
			return fmt.Sprintf("stat %s: %v, %v; want %v", p, fi, err, want)
		case want != 0:
			return ""
		case err != nil:
			return fmt.Sprintf("stat %s: %v", p, err)
		case !sameInfo(fi, m.info(p)):
			return fmt.Sprintf("stat %s: %+v, want %+v", p, fi, m.info(p))
		}
		if !fi.dir {
			b, err := fs.readFile(ctx, p)
			if err != nil || !bytes.Equal(b, m.nodes[p].file.data) {
				return fmt.Sprintf("read %s: %d bytes, %v; want the model's %d", p, len(b), err, len(m.nodes[p].file.data))
			}
			return ""
		}
	}
	names, err := fs.readDir(ctx, p)
	if err != nil {
		return fmt.Sprintf("readdir %q: %v", p, err)
	}
	if p == "" {
		names = slices.DeleteFunc(names, func(n string) bool { return n == "lost+found" || strings.HasPrefix(n, ".") })
	}
	if want := m.children(p); !slices.Equal(names, want) {
		return fmt.Sprintf("readdir %q: %v, want %v", p, names, want)
	}
	return ""
}

// runOp performs o through fs and returns what a reading operation
// answered (bytes, a fileInfo or names).
func runOp(ctx context.Context, fs clientFS, o op) (any, error) {
	switch o.kind {
	case "write":
		return nil, fs.writeFile(ctx, o.a, o.data, o.sync)
	case "read":
		return fs.readFile(ctx, o.a)
	case "mkdir":
		return nil, fs.mkdir(ctx, o.a, o.mode)
	case "rename":
		return nil, fs.rename(ctx, o.a, o.b)
	case "unlink":
		return nil, fs.unlink(ctx, o.a)
	case "rmdir":
		return nil, fs.rmdir(ctx, o.a)
	case "link":
		return nil, fs.link(ctx, o.a, o.b)
	case "truncate":
		return nil, fs.truncate(ctx, o.a, o.size)
	case "chmod":
		return nil, fs.chmod(ctx, o.a, o.mode)
	case "stat":
		return fs.stat(ctx, o.a)
	case "readdir":
		return fs.readDir(ctx, o.a)
	}
	return nil, fmt.Errorf("unknown operation %q", o.kind)
}

// checkAnswer compares what a reading operation answered with the model;
// "" when it agrees.
func checkAnswer(m *fsModel, o op, got any) string {
	switch o.kind {
	case "read":
		want := m.nodes[o.a].file.data
		if b := got.([]byte); !bytes.Equal(b, want) {
			return fmt.Sprintf("read %d bytes, not the model's %d (first difference at %d)", len(b), len(want), firstDiff(b, want))
		}
	case "stat":
		if fi := got.(fileInfo); !sameInfo(fi, m.info(o.a)) {
			return fmt.Sprintf("stat says %+v, the model %+v", fi, m.info(o.a))
		}
	case "readdir":
		names := got.([]string)
		if o.a == "" {
			names = slices.DeleteFunc(names, func(n string) bool { return n == "lost+found" || strings.HasPrefix(n, ".") })
		}
		if want := m.children(o.a); !slices.Equal(names, want) {
			return fmt.Sprintf("readdir says %v, the model %v", names, want)
		}
	}
	return ""
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Names the random operations use. A name is a directory's (d...) or a
// file's (f...) for good: the test's store (versitygw's posix backend)
// cannot hold an object x and objects under x/ at once, even after x was
// deleted (README, "Embedded store limits"), so no operation that succeeds
// makes a file where a directory was or the reverse. Failing operations
// cross the kinds freely.
var (
	dirNames  = []string{"d0", "d1", "d2"}
	fileNames = []string{"f0", "f1", "f2", "f3"}
)

// randomPath is a path of the model most of the time (so that operations
// mostly succeed), else any path of up to three names; its last name is
// of the kind asked for (dir or not) unless any is set.
func randomPath(rng *rand.Rand, m *fsModel, dir, any bool) string {
	if rng.IntN(10) < 6 {
		var ps []string
		for _, p := range m.paths() {
			if any || m.nodes[p].dir == dir {
				ps = append(ps, p)
			}
		}
		if len(ps) > 0 {
			return ps[rng.IntN(len(ps))]
		}
	}
	p := ""
	for depth := rng.IntN(3); depth > 0; depth-- {
		p = joinPath(p, dirNames[rng.IntN(len(dirNames))])
	}
	if dir || (any && rng.IntN(2) == 0) {
		return joinPath(p, dirNames[rng.IntN(len(dirNames))])
	}
	return joinPath(p, fileNames[rng.IntN(len(fileNames))])
}

// newName is a name of the kind asked for in a directory of the model (or
// the root): mostly a name that does not exist yet, for creates.
func newName(rng *rand.Rand, m *fsModel, dir bool) string {
	parents := []string{""}
	for _, p := range m.paths() {
		if m.nodes[p].dir {
			parents = append(parents, p)
		}
	}
	names := fileNames
	if dir {
		names = dirNames
	}
	return joinPath(parents[rng.IntN(len(parents))], names[rng.IntN(len(names))])
}

// dirName reports whether p's last name is a directory's.
func dirName(p string) bool {
	return strings.HasPrefix(p[strings.LastIndexByte(p, '/')+1:], "d")
}

// crossesKinds reports whether o, if it succeeds, makes a file under a
// directory's name or a directory under a file's.
func crossesKinds(m *fsModel, o op) bool {
	if len(m.expect(o, true)) > 0 && len(m.expect(o, false)) > 0 {
		return false
	}
	switch o.kind {
	case "write":
		return dirName(o.a)
	case "link":
		return dirName(o.b)
	case "mkdir":
		return !dirName(o.a)
	case "rename":
		if n := m.nodes[o.a]; n != nil {
			return n.dir != dirName(o.b)
		}
	}
	return false
}

// randomOp draws operation i, on a random server.
func randomOp(rng *rand.Rand, m *fsModel, i int) op {
	for {
		if o := drawOp(rng, m, i); !crossesKinds(m, o) {
			return o
		}
	}
}

func drawOp(rng *rand.Rand, m *fsModel, i int) op {
	o := op{server: rng.IntN(3)}
	kinds := []struct {
		kind   string
		weight int
	}{{"write", 24}, {"read", 10}, {"mkdir", 12}, {"rename", 14}, {"unlink", 7}, {"rmdir", 5},
		{"link", 6}, {"truncate", 6}, {"chmod", 6}, {"stat", 5}, {"readdir", 5}}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	r := rng.IntN(total)
	for _, k := range kinds {
		if r < k.weight {
			o.kind = k.kind
			break
		}
		r -= k.weight
	}
	// Mostly a path of the kind the operation works on; one in eight of
	// any kind, for the errors.
	cross := rng.IntN(8) == 0
	creates := rng.IntN(10) < 6 // a new name, where the operation makes one
	switch o.kind {
	case "mkdir":
		o.a = randomPath(rng, m, true, cross)
		if creates {
			o.a = newName(rng, m, true)
		}
	case "rmdir", "readdir":
		o.a = randomPath(rng, m, true, cross)
	case "write":
		o.a = randomPath(rng, m, false, cross)
		if creates && rng.IntN(2) == 0 {
			o.a = newName(rng, m, false)
		}
	case "rename":
		o.a = randomPath(rng, m, rng.IntN(3) == 0, cross)
	default:
		o.a = randomPath(rng, m, false, cross)
	}
	switch o.kind {
	case "write":
		o.data = content(rng, i, o.a)
		o.sync = rng.IntN(2) == 0
	case "rename", "link":
		o.b = randomPath(rng, m, dirName(o.a), cross)
		if creates {
			o.b = newName(rng, m, dirName(o.a))
		}
	case "truncate":
		o.size = int64(rng.IntN(6000))
	case "chmod":
		o.mode = []uint32{0o600, 0o640, 0o644, 0o700, 0o750, 0o755}[rng.IntN(6)]
	case "mkdir":
		o.mode = []uint32{0o700, 0o750, 0o755}[rng.IntN(3)]
	case "readdir":
		if rng.IntN(4) == 0 {
			o.a = ""
		}
	}
	return o
}

// content is recognisable data for write i of p: a line naming both,
// then random bytes; most files are small, some span many blocks.
func content(rng *rand.Rand, i int, p string) []byte {
	n := rng.IntN(4096)
	if rng.IntN(4) == 0 {
		n = 4096 + rng.IntN(300<<10)
	}
	b := []byte(fmt.Sprintf("write %d of %s\n", i, p))
	for len(b) < n {
		b = append(b, byte(rng.Uint32()))
	}
	return b
}

// diffBucket compares the bucket (key to body and metadata) with the
// model: an object per file name with its bytes and mode, a marker per
// directory ("d/"), and nothing else. "" when they agree.
func diffBucket(m *fsModel, bodies map[string][]byte, mds map[string]map[string]string) string {
	var out []string
	want := map[string]bool{}
	for _, p := range m.paths() {
		n := m.nodes[p]
		if n.dir {
			want[p+"/"] = true
			continue
		}
		want[p] = true
		b, ok := bodies[p]
		switch {
		case !ok:
			out = append(out, p+" missing")
		case !bytes.Equal(b, n.file.data):
			out = append(out, fmt.Sprintf("%s holds other bytes (%d, want %d)", p, len(b), len(n.file.data)))
		default:
			if mode, err := strconv.ParseUint(mds[p]["mode"], 10, 32); err != nil || uint32(mode)&0o7777 != n.file.mode {
				out = append(out, fmt.Sprintf("%s has mode %q, want %04o", p, mds[p]["mode"], n.file.mode))
			}
		}
	}
	for k := range bodies {
		if !want[k] && !strings.HasPrefix(k, "lost+found/") {
			out = append(out, k+" should not exist")
		}
	}
	for k := range want {
		if _, ok := bodies[k]; !ok && strings.HasSuffix(k, "/") {
			out = append(out, k+" (a directory's marker) missing")
		}
	}
	sort.Strings(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("and %d more", len(out)-10))
	}
	return strings.Join(out, "; ")
}
