package fuse_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// The randomised differential sync test (issue 10): a file-side actor
// working through the mount (writes, unlinks, renames, symlinks, hard
// links, mkdir and rmdir) and a bucket-side actor working through S3
// (puts, deletes, copies, restores of older versions) change a small
// namespace at once, with a short export delay, events and polling; at
// each quiet point the rules of two-way sync are checked on the result:
//
//   - directories: the tree's directories are the bucket's (markers and
//     prefixes of current objects), and the one the file side makes and
//     removes exists if and only if the file side made it last or the
//     bucket holds a file under it;
//
//   - convergence: the tree equals the bucket's current objects (lost+found
//     aside);
//   - no resurrection, no invention: each name ends as the last state one of
//     the two sides gave it, and as the only side's last state when one
//     side alone touched it;
//   - the bucket wins a race: a bucket-side write is superseded only by a
//     file-side change that ended after it began (the two may overlap: the
//     import can land between them), except that a bucket-side delete of
//     another file's version (see hidAnotherFile) leaves the file side's
//     file alone;
//   - nothing the file side wrote is lost: the last state the file side gave
//     a name is current somewhere, was exported (a version in the bucket),
//     or is in lost+found, each entry of which holds bytes the file side
//     wrote.
//
// Each content is a token naming its writer and step, so where bytes came
// from is never in doubt. Seeds are printed; replay one with
// -diffsync.seed=N -diffsync.iterations=1 (the operations replay; their
// timing against the other actor and the engine does not). A variant runs
// the file side alone and checks that no conflict is ever counted.

var (
	diffSeed       = flag.Uint64("diffsync.seed", 0, "seed of the first iteration of TestDifferentialSync (default: from the clock, or the fixed set's)")
	diffIterations = flag.Int("diffsync.iterations", 0, "iterations of TestDifferentialSync (default: the fixed set CI runs)")
)

// The fixed set `go test ./...` runs: a few iterations from one seed, so
// CI sees the same operation sequences every time (the timing of the two
// actors still differs from run to run). Longer runs pass
// -diffsync.iterations.
const (
	diffFixedSeed       = 20261201
	diffFixedIterations = 4
)

// diffKeys is the namespace both actors work on: regular files and
// symlinks (a symlink's content is "symlink:" and its target). d exists
// from the start; e is made and removed by the file side (diffDir), and
// made by the bucket side when it puts a key under it.
var diffKeys = []string{"n0", "n1", "n2", "d/n0", "d/n1", "d/n2", "e/n0", "e/n1"}

// diffDir is the directory the file side makes and removes.
const diffDir = "e"

// symlinkContent is how the model writes a symlink to target.
func symlinkContent(target string) string { return "symlink:" + target }

// sideState is the last state one side gave a key: a content, or absent.
// Only set once that side touched the key.
type sideState struct {
	touched       bool
	present       bool
	content       string
	start, end    time.Time
	uncertainRead bool // the content could not be told (a racing import)
	// fresh: the file at the key is one the file side put there (a create,
	// or a rename onto it), not one it had from the bucket.
	fresh bool
	// ino: the file side's file at the key after its last change.
	ino uint64
	// hidIno: for a bucket-side delete, the inode whose export wrote the
	// version it hid (0: a version bucketfs did not write).
	hidIno uint64
}

type diffModel struct {
	mu          sync.Mutex
	file, bkt   map[string]*sideState
	fileWrote   map[string]bool // every content the file side wrote
	bucketWrote map[string]bool
	// dirOp is the file side's last successful mkdir or rmdir of diffDir
	// ("" if none).
	dirOp  string
	log    []string
	engine lockedBuffer // the engine's log
}

func newDiffModel() *diffModel {
	m := &diffModel{file: map[string]*sideState{}, bkt: map[string]*sideState{},
		fileWrote: map[string]bool{}, bucketWrote: map[string]bool{}}
	for _, k := range diffKeys {
		m.file[k], m.bkt[k] = &sideState{}, &sideState{}
	}
	return m
}

// logOnly records what in the history without changing any state.
func (m *diffModel) logOnly(at time.Time, what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.log = append(m.log, fmt.Sprintf("%s %s", at.Format("15:04:05.000000"), what))
}

func (m *diffModel) note(side map[string]*sideState, key string, present bool, content string, start, end time.Time, what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	*side[key] = sideState{touched: true, present: present, content: content, start: start, end: end}
	m.log = append(m.log, fmt.Sprintf("%s %s", end.Format("15:04:05.000000"), what))
}

func TestDifferentialSync(t *testing.T) {
	diffIterate(t, "TestDifferentialSync", func(t *testing.T, seed uint64) { runDiffSync(t, seed, true, false) })
}

// TestDifferentialSyncAWSListing is TestDifferentialSync on a bucket that
// lists like AWS S3: a prefix only while a current object is under it
// (the embedded store otherwise lists, as MinIO does, also prefixes that
// hold only old versions and delete markers). Issue 10 asks for a run on a
// store that lists like AWS; gofakes3 v1.2.0 does, but its versioning
// cannot carry this test: a copy ignores the versionId of its source and
// answers with the source's version id, and deleting a key's current
// version leaves the key with none, and the next HEAD of it panics in
// its server (bucketfs's start-up probe of conditional writes, which
// removes its probe object's versions, gets there already).
func TestDifferentialSyncAWSListing(t *testing.T) {
	diffIterate(t, "TestDifferentialSyncAWSListing", func(t *testing.T, seed uint64) { runDiffSync(t, seed, true, true) })
}

// TestDifferentialSyncFileSideOnly is issue 10's item 2: with only the file
// side writing (longer runs of creates, writes, renames, unlinks, links,
// symlinks, mkdir and rmdir, with export delays down to 10 ms), bucketfs
// must recognise every object in the bucket as its own: not one conflict,
// nothing in lost+found, and the bucket ends as the file tree.
func TestDifferentialSyncFileSideOnly(t *testing.T) {
	diffIterate(t, "TestDifferentialSyncFileSideOnly", func(t *testing.T, seed uint64) { runDiffSync(t, seed, false, false) })
}

// diffIterate runs fn for the iterations and seeds the flags ask for (by
// default the fixed set).
func diffIterate(t *testing.T, name string, fn func(t *testing.T, seed uint64)) {
	iterations, seed := *diffIterations, *diffSeed
	switch {
	case iterations == 0:
		iterations = diffFixedIterations
		if seed == 0 {
			seed = diffFixedSeed
		}
	case seed == 0:
		seed = uint64(time.Now().UnixNano())
	}
	start := time.Now()
	for i := range iterations {
		s := seed + uint64(i)
		t.Run(fmt.Sprint(s), func(t *testing.T) {
			t.Logf("seed %d (replay: go test ./internal/frontend/fuse -run %s -diffsync.seed=%d -diffsync.iterations=1)", s, name, s)
			fn(t, s)
		})
	}
	t.Logf("%d iterations in %v", iterations, time.Since(start).Round(time.Millisecond))
}

// runDiffSync runs one iteration: both actors at once, or the file side
// alone (with more steps); on a bucket that lists like AWS S3 or like the
// embedded store.
func runDiffSync(t *testing.T, seed uint64, bucketSide, awsListing bool) {
	rng := rand.New(rand.NewPCG(seed, 7))
	delays := []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second}
	delay := delays[rng.IntN(len(delays))]
	m := newDiffModel()
	opts := []option{withExportDelay(delay), withPoll(100 * time.Millisecond), withRevalidateTTL(time.Millisecond),
		withLogger(m.engineLog())}
	newEnvFor := newEnv
	if awsListing {
		newEnvFor = newAWSListingEnv
	}
	e := newEnvFor(t, opts...)
	forwardEvents(e)
	mkdir(t, e.path("d"))
	steps := 12 + rng.IntN(12)
	if !bucketSide {
		steps = 30 + rng.IntN(30)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	fileSeed, bucketSeed := rng.Uint64(), rng.Uint64()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := fileActor(e, m, rand.New(rand.NewPCG(fileSeed, 1)), steps); err != nil {
			errs <- err
		}
	}()
	if bucketSide {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := bucketActor(e, m, rand.New(rand.NewPCG(bucketSeed, 2)), steps); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("seed %d, export delay %v: %v", seed, delay, err)
	}
	// Quiet: no actor runs. Let exports, events and polls settle.
	var tree, bucket map[string]string
	var treeDirs, bucketDirs map[string]bool
	deadline := time.Now().Add(30 * time.Second)
	for {
		e.flush()
		tree, treeDirs = e.fileTree()
		bucket, bucketDirs = e.bucketState()
		if maps.Equal(tree, bucket) && maps.Equal(treeDirs, bucketDirs) && e.eng.Importer.EventStats().Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			m.fail(t, seed, delay, fmt.Sprintf("no convergence:\n  tree   %v %v\n  bucket %v %v",
				tree, slices.Sorted(maps.Keys(treeDirs)), bucket, slices.Sorted(maps.Keys(bucketDirs))))
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.check(t, e, seed, delay, tree, treeDirs)
	if !bucketSide {
		conflicts := e.eng.Importer.Stats().Conflicts + e.eng.Exporter.Stats().Conflicts
		if lf := e.lostFound(); conflicts != 0 || len(lf) != 0 {
			m.fail(t, seed, delay, fmt.Sprintf("only the file side wrote, yet %d conflicts were counted and lost+found holds %v\nbucket versions, oldest first:\n  %s",
				conflicts, lf, strings.Join(e.versionHistory(), "\n  ")))
		}
	}
}

// fileActor changes the namespace through the mount: writes, unlinks,
// renames, symlinks and hard links (each made under a temporary name and
// renamed onto the key, as `ln -sf` and editors do), and mkdir and rmdir
// of diffDir. An operation whose directory is missing is skipped.
func fileActor(e *env, m *diffModel, rng *rand.Rand, steps int) error {
	for i := range steps {
		key := diffKeys[rng.IntN(len(diffKeys))]
		p := e.path(key)
		start := time.Now()
		switch op := rng.IntN(16); {
		case op < 6:
			content := fmt.Sprintf("file-%d-%s", i, key)
			m.mu.Lock()
			m.fileWrote[content] = true
			m.mu.Unlock()
			_, err := os.Lstat(p)
			fresh := errors.Is(err, os.ErrNotExist)
			m.mu.Lock()
			prev := *m.file[key]
			m.mu.Unlock()
			// The file's names now: the write (its O_TRUNC first) reaches
			// those that still name it when it lands.
			var sharing []string
			if ino := inoOf(p); ino != 0 {
				for _, k := range diffKeys {
					if inoOf(e.path(k)) == ino {
						sharing = append(sharing, k)
					}
				}
			}
			// O_NOFOLLOW: a write through a symlink at the key would
			// change its target, another name.
			ino, err := writeNoFollow(p, content)
			if errors.Is(err, syscall.ELOOP) {
				if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("unlink the symlink %s: %w", key, err)
				}
				m.note(m.file, key, false, "", start, time.Now(), "file unlink (a symlink, to write) "+key)
				continue
			} else if err != nil {
				if errors.Is(err, os.ErrNotExist) && filepath.Dir(key) == diffDir {
					continue // diffDir is not there
				}
				return fmt.Errorf("write %s: %w", key, err)
			}
			end := time.Now()
			// Every name of the file written (the descriptor's inode)
			// shows the write; a write to the file the file side itself
			// put there keeps it a new file.
			isNew := fresh || prev.fresh && ino == prev.ino
			for _, k := range diffKeys {
				switch {
				case inoOf(e.path(k)) == ino:
					what := "file write " + k + " " + content
					if k != key {
						what = "file write (hard link of " + key + ") " + k + " " + content
					}
					m.note(m.file, k, true, content, start, end, what)
					m.mu.Lock()
					m.file[k].fresh, m.file[k].ino = isNew, ino
					m.mu.Unlock()
				case k == key || slices.Contains(sharing, k):
					// A name the file had when the write began and lost
					// during it (an import of a bucket-side change took
					// it): its last file-side state is the file's at that
					// moment, before, within or after the write, and a
					// conflict keeps that one in lost+found. Which one,
					// the test cannot tell.
					m.mu.Lock()
					m.file[k].uncertainRead = true
					m.log = append(m.log, fmt.Sprintf("%s file write %s: %s left the file during it", end.Format("15:04:05.000000"), key, k))
					m.mu.Unlock()
				}
			}
		case op < 8:
			err := os.Remove(p)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("unlink %s: %w", key, err)
			}
			m.note(m.file, key, false, "", start, time.Now(), "file unlink "+key)
		case op < 11:
			to := diffKeys[rng.IntN(len(diffKeys))]
			if to == key {
				continue
			}
			same := inoOf(p) != 0 && inoOf(p) == inoOf(e.path(to))
			err := os.Rename(p, e.path(to))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("rename %s %s: %w", key, to, err)
			}
			if same && inoOf(p) != 0 {
				continue // two names of one file: rename(2) does nothing
			}
			end := time.Now()
			m.note(m.file, key, false, "", start, end, "file rename "+key+" -> "+to)
			m.noteRenamed(e, to, start, end, "file rename-target "+to)
		case op < 12:
			target := fmt.Sprintf("t-%d-%s", i, key)
			m.mu.Lock()
			m.fileWrote[symlinkContent(target)] = true
			m.mu.Unlock()
			tmp := filepath.Join(filepath.Dir(p), ".tmp-symlink")
			if err := os.Symlink(target, tmp); errors.Is(err, os.ErrNotExist) {
				continue
			} else if err != nil {
				return fmt.Errorf("symlink %s: %w", key, err)
			}
			if err := os.Rename(tmp, p); errors.Is(err, os.ErrNotExist) {
				continue // diffDir went away
			} else if err != nil {
				return fmt.Errorf("rename a symlink onto %s: %w", key, err)
			}
			m.noteRenamed(e, key, start, time.Now(), "file symlink "+key)
		case op < 13:
			to := diffKeys[rng.IntN(len(diffKeys))]
			if to == key {
				continue
			}
			tmp := filepath.Join(filepath.Dir(e.path(to)), ".tmp-link")
			if err := os.Link(p, tmp); errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.EPERM) {
				continue // nothing there, a symlink's target missing, or a directory
			} else if err != nil {
				return fmt.Errorf("link %s: %w", key, err)
			}
			if err := os.Rename(tmp, e.path(to)); errors.Is(err, os.ErrNotExist) {
				continue
			} else if err != nil {
				return fmt.Errorf("rename a link of %s onto %s: %w", key, to, err)
			}
			if inoOf(tmp) != 0 {
				// to was a name of the same file already: the rename did
				// nothing, and the temporary name goes again.
				if err := os.Remove(tmp); err != nil {
					return fmt.Errorf("unlink %s: %w", tmp, err)
				}
				continue
			}
			m.noteRenamed(e, to, start, time.Now(), "file link "+key+" -> "+to)
		case op < 14:
			if err := os.Mkdir(e.path(diffDir), 0o755); errors.Is(err, os.ErrExist) {
				continue
			} else if err != nil {
				return fmt.Errorf("mkdir %s: %w", diffDir, err)
			}
			m.noteDir(time.Now(), "mkdir")
		default:
			if err := syscall.Rmdir(e.path(diffDir)); errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTEMPTY) {
				continue
			} else if err != nil {
				return fmt.Errorf("rmdir %s: %w", diffDir, err)
			}
			m.noteDir(time.Now(), "rmdir")
		}
		time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
	}
	return nil
}

// writeNoFollow replaces the content of the file at path (made if
// missing), refusing a symlink there with ELOOP, and returns the inode it
// wrote: the one the name had when it was opened.
func writeNoFollow(path, content string) (ino uint64, err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return 0, err
	}
	_, err = f.WriteString(content)
	var st syscall.Stat_t
	if serr := syscall.Fstat(int(f.Fd()), &st); err == nil {
		err = serr
	}
	return st.Ino, errors.Join(err, f.Close())
}

// noteRenamed records the file the file side just put at key with a
// rename (of a file, a new symlink or a new link): a new file at the name,
// whose content is read back.
func (m *diffModel) noteRenamed(e *env, key string, start, end time.Time, what string) {
	content, err := e.fileState(e.path(key))
	m.note(m.file, key, true, content, start, end, what+" "+content)
	m.mu.Lock()
	m.file[key].fresh, m.file[key].ino = true, inoOf(e.path(key))
	m.file[key].uncertainRead = err != nil
	m.mu.Unlock()
}

func (m *diffModel) noteDir(at time.Time, op string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dirOp = op
	m.log = append(m.log, fmt.Sprintf("%s file %s %s", at.Format("15:04:05.000000"), op, diffDir))
}

// fileState reads the content of a regular file or symlink of the mount.
func (e *env) fileState(path string) (string, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return "", err
	}
	if st.Mode()&os.ModeSymlink != 0 {
		t, err := os.Readlink(path)
		return symlinkContent(t), err
	}
	b, err := os.ReadFile(path)
	return string(b), err
}

// bucketActor changes the namespace through S3, as another tool would.
func bucketActor(e *env, m *diffModel, rng *rand.Rand, steps int) error {
	ctx := context.Background()
	for i := range steps {
		key := diffKeys[rng.IntN(len(diffKeys))]
		start := time.Now()
		switch op := rng.IntN(10); {
		case op < 5:
			content := fmt.Sprintf("bucket-%d-%s", i, key)
			m.mu.Lock()
			m.bucketWrote[content] = true
			m.mu.Unlock()
			if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &e.bucket, Key: &key, Body: strings.NewReader(content)}); err != nil {
				return fmt.Errorf("put %s: %w", key, err)
			}
			m.note(m.bkt, key, true, content, start, time.Now(), "bucket put "+key+" "+content)
		case op < 7:
			out, err := e.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &e.bucket, Key: &key})
			if err != nil {
				return fmt.Errorf("delete %s: %w", key, err)
			}
			end := time.Now()
			// A delete of a key with no current object deleted nothing:
			// it is no change of the bucket side.
			if hid, err := e.deletedAVersion(key, aws.ToString(out.VersionId)); err != nil {
				return err
			} else if hid != "" {
				writer, err := e.writerInode(key, hid)
				if err != nil {
					return err
				}
				m.note(m.bkt, key, false, "", start, end, fmt.Sprintf("bucket delete %s (hid a version by inode %d)", key, writer))
				m.mu.Lock()
				m.bkt[key].hidIno = writer
				m.mu.Unlock()
			} else {
				m.logOnly(end, "bucket delete (of nothing) "+key)
			}
		case op < 9:
			// Copy another key's current object here.
			from := diffKeys[rng.IntN(len(diffKeys))]
			if from == key {
				continue
			}
			b, version, err := e.objectState(ctx, from, "")
			if err != nil {
				continue // nothing there now
			}
			if _, err := e.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &e.bucket, Key: &key,
				CopySource: aws.String(e.bucket + "/" + from + "?versionId=" + version)}); err != nil {
				return fmt.Errorf("copy %s to %s: %w", from, key, err)
			}
			m.note(m.bkt, key, true, b, start, time.Now(), "bucket copy "+from+" -> "+key+" "+b)
		default:
			// Restore an older version of the key.
			vs, err := e.s3.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: &e.bucket, Prefix: &key})
			if err != nil {
				return err
			}
			var old []types.ObjectVersion
			for _, v := range vs.Versions {
				if aws.ToString(v.Key) == key && !aws.ToBool(v.IsLatest) {
					old = append(old, v)
				}
			}
			if len(old) == 0 {
				continue
			}
			v := old[rng.IntN(len(old))]
			b, _, err := e.objectState(ctx, key, aws.ToString(v.VersionId))
			if err != nil {
				return err
			}
			if _, err := e.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &e.bucket, Key: &key,
				CopySource: aws.String(e.bucket + "/" + key + "?versionId=" + aws.ToString(v.VersionId))}); err != nil {
				return fmt.Errorf("restore %s: %w", key, err)
			}
			m.note(m.bkt, key, true, b, start, time.Now(), "bucket restore "+key+" "+b)
		}
		time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
	}
	return nil
}

// fileTree reads every regular file and symlink of the mount (lost+found
// aside) into a map from its path to its content, and every directory
// into dirs.
func (e *env) fileTree() (files map[string]string, dirs map[string]bool) {
	e.t.Helper()
	files, dirs = map[string]string{}, map[string]bool{}
	lf := e.eng.Meta.LostFoundName()
	err := filepath.WalkDir(e.mnt, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(e.mnt, p)
		switch {
		case d.IsDir() && rel == lf:
			return filepath.SkipDir
		case d.IsDir():
			if rel != "." {
				dirs[rel] = true
			}
			return nil
		case !d.Type().IsRegular() && d.Type()&os.ModeSymlink == 0:
			return nil
		}
		content, err := e.fileState(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		files[rel] = content
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return files, dirs
}

// bucketState reads every current object (a symlink's as the model writes
// it), and the directories they make: every prefix of a key, and every
// directory marker.
func (e *env) bucketState() (objects map[string]string, dirs map[string]bool) {
	e.t.Helper()
	objects, dirs = map[string]string{}, map[string]bool{}
	for _, k := range e.currentKeys("") {
		for d := filepath.Dir(strings.TrimSuffix(k, "/")); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
		if strings.HasSuffix(k, "/") {
			dirs[strings.TrimSuffix(k, "/")] = true
			continue
		}
		content, _, err := e.objectState(context.Background(), k, "")
		if err == nil {
			objects[k] = content
		}
	}
	return objects, dirs
}

// objectState reads a version of key ("": the current one) as the model
// writes contents: a symlink object (its mode says so) as "symlink:" and
// its body.
func (e *env) objectState(ctx context.Context, key, version string) (content, versionID string, err error) {
	o, err := e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &e.bucket, Key: &key, VersionId: optional(version)})
	if err != nil {
		return "", "", err
	}
	defer o.Body.Close()
	b, err := io.ReadAll(o.Body)
	if err != nil {
		return "", "", err
	}
	if mode, err := strconv.ParseUint(o.Metadata["mode"], 10, 32); err == nil && mode&syscall.S_IFMT == syscall.S_IFLNK {
		return symlinkContent(string(b)), aws.ToString(o.VersionId), nil
	}
	return string(b), aws.ToString(o.VersionId), nil
}

func (m *diffModel) fail(t *testing.T, seed uint64, delay time.Duration, msg string) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	t.Fatalf("seed %d, export delay %v: %s\nhistory:\n  %s\nengine log:\n%s", seed, delay, msg, strings.Join(m.log, "\n  "), m.engine.String())
}

// engineLog returns a logger that keeps the engine's log (debug level
// and up) for the failure report of this iteration.
func (m *diffModel) engineLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(&m.engine, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// check tests the rules at a quiet point; tree is the converged state.
func (m *diffModel) check(t *testing.T, e *env, seed uint64, delay time.Duration, tree map[string]string, dirs map[string]bool) {
	t.Helper()
	var problems []string
	// diffDir exists if and only if the file side made it last (and did
	// not remove it after) or the bucket holds a file under it.
	under := false
	for k := range tree {
		under = under || strings.HasPrefix(k, diffDir+"/")
	}
	if want := m.dirOp == "mkdir" || under; dirs[diffDir] != want {
		problems = append(problems, fmt.Sprintf("%s: exists %v; the file side's last mkdir or rmdir of it was %q, and files under it: %v", diffDir, dirs[diffDir], m.dirOp, under))
	}
	for _, k := range diffKeys {
		f, b := m.file[k], m.bkt[k]
		got, present := tree[k]
		same := func(s *sideState) bool { return s.present == present && (!present || s.content == got) }
		switch {
		case f.uncertainRead:
		case !f.touched && !b.touched:
			if present {
				problems = append(problems, fmt.Sprintf("%s: untouched, holds %q", k, got))
			}
		case !f.touched && !same(b):
			problems = append(problems, fmt.Sprintf("%s: only the bucket side changed it, last to %v %q; it holds %v %q", k, b.present, b.content, present, got))
		case !b.touched && !same(f):
			problems = append(problems, fmt.Sprintf("%s: only the file side changed it, last to %v %q; it holds %v %q", k, f.present, f.content, present, got))
		case f.touched && b.touched && !same(f) && !same(b):
			problems = append(problems, fmt.Sprintf("%s: ends %v %q, neither side's last state (file %v %q, bucket %v %q)", k, present, got, f.present, f.content, b.present, b.content))
		case f.touched && b.touched && !same(b) && !f.end.After(b.start) && !hidAnotherFile(f, b):
			problems = append(problems, fmt.Sprintf("%s: the bucket's last write (%v %q, begun %s) lost to a file-side change ended before it began (%s)", k, b.present, b.content, b.start.Format("15:04:05.000000"), f.end.Format("15:04:05.000000")))
		}
	}
	// Every lost+found entry holds bytes the file side wrote.
	lfDir := e.path(e.eng.Meta.LostFoundName())
	kept := map[string]bool{}
	for _, n := range e.lostFound() {
		b, err := e.fileState(filepath.Join(lfDir, n))
		if err != nil {
			t.Fatal(err)
		}
		kept[b] = true
		if !m.fileWrote[b] && !m.bucketWrote[b] {
			problems = append(problems, fmt.Sprintf("lost+found %s holds %q, which nobody wrote", n, b))
		}
	}
	if n, c := len(kept), e.eng.Importer.Stats().Conflicts+e.eng.Exporter.Stats().Conflicts; int64(n) > c {
		problems = append(problems, fmt.Sprintf("lost+found holds %d entries, %d conflicts counted", n, c))
	}
	// The file side's last content of each name survives somewhere.
	versions := e.allVersionContents()
	current := map[string]bool{}
	for _, v := range tree {
		current[v] = true
	}
	for _, k := range diffKeys {
		f := m.file[k]
		if f.touched && f.present && !f.uncertainRead && m.fileWrote[f.content] &&
			!current[f.content] && !versions[f.content] && !kept[f.content] {
			problems = append(problems, fmt.Sprintf("%s: the file side's last content %q is nowhere: not current, never exported, not in lost+found", k, f.content))
		}
	}
	if len(problems) > 0 {
		m.fail(t, seed, delay, "\n  "+strings.Join(problems, "\n  ")+
			"\nbucket versions, oldest first:\n  "+strings.Join(e.versionHistory(), "\n  "))
	}
}

// hidAnotherFile reports whether the bucket side's last change, a delete,
// hid a version of another file than the one the file side holds at the
// key: one another inode exported, or, for a version bucketfs did not
// write, one the file side had replaced with a new file (a create or a
// rename onto the name). Both sides removed that version then, and the
// file side's file is no conflict.
func hidAnotherFile(f, b *sideState) bool {
	if b.present {
		return false
	}
	if b.hidIno != 0 {
		return f.ino != 0 && b.hidIno != f.ino
	}
	return f.fresh
}

// inoOf returns path's inode number (0 if it cannot be read: a race).
func inoOf(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// eachVersion calls fn for every object version of the bucket, and for
// every delete marker (marker set).
func (e *env) eachVersion(fn func(key, id string, marker bool)) {
	e.t.Helper()
	p := s3.NewListObjectVersionsPaginator(e.s3, &s3.ListObjectVersionsInput{Bucket: &e.bucket})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		for _, v := range page.Versions {
			fn(aws.ToString(v.Key), aws.ToString(v.VersionId), false)
		}
		for _, d := range page.DeleteMarkers {
			fn(aws.ToString(d.Key), aws.ToString(d.VersionId), true)
		}
	}
}

// versionHistory describes every version and delete marker of the
// bucket, oldest first: key, version id, origin tag and content.
func (e *env) versionHistory() []string {
	e.t.Helper()
	ctx := context.Background()
	type entry struct{ id, line string }
	var all []entry
	e.eachVersion(func(key, id string, marker bool) {
		if marker {
			all = append(all, entry{id, fmt.Sprintf("%s %s: delete marker", id, key)})
			return
		}
		h, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &e.bucket, Key: &key, VersionId: &id})
		origin := ""
		if err == nil {
			origin = h.Metadata["bucketfs-origin"]
		}
		b, _, _ := e.objectState(ctx, key, id)
		all = append(all, entry{id, fmt.Sprintf("%s %s origin %q: %q", id, key, origin, b)})
	})
	// Version ids of the embedded store sort by time.
	slices.SortFunc(all, func(a, b entry) int { return strings.Compare(a.id, b.id) })
	out := make([]string, len(all))
	for i, en := range all {
		out[i] = en.line
	}
	return out
}

// allVersionContents reads every object version the bucket holds.
func (e *env) allVersionContents() map[string]bool {
	e.t.Helper()
	out := map[string]bool{}
	e.eachVersion(func(key, id string, marker bool) {
		if marker {
			return
		}
		b, _, err := e.objectState(context.Background(), key, id)
		if err != nil {
			e.t.Fatal(err)
		}
		out[b] = true
	})
	return out
}

// deletedAVersion returns the object version right below the delete marker
// marker of key, the one the delete hid ("" if it hid none).
func (e *env) deletedAVersion(key, marker string) (string, error) {
	out, err := e.s3.ListObjectVersions(context.Background(), &s3.ListObjectVersionsInput{Bucket: &e.bucket, Prefix: &key})
	if err != nil {
		return "", err
	}
	type entry struct {
		id     string
		marker bool
		at     time.Time
	}
	var all []entry
	for _, v := range out.Versions {
		if aws.ToString(v.Key) == key {
			all = append(all, entry{aws.ToString(v.VersionId), false, aws.ToTime(v.LastModified)})
		}
	}
	for _, d := range out.DeleteMarkers {
		if aws.ToString(d.Key) == key {
			all = append(all, entry{aws.ToString(d.VersionId), true, aws.ToTime(d.LastModified)})
		}
	}
	// Newest first; version ids of the embedded store sort by time.
	slices.SortFunc(all, func(a, b entry) int { return strings.Compare(b.id, a.id) })
	for i, en := range all {
		if en.id == marker && i+1 < len(all) && !all[i+1].marker {
			return all[i+1].id, nil
		}
	}
	return "", nil
}

// writerInode returns the inode whose export wrote the version of key, from
// its origin tag (0 for a version bucketfs did not write).
func (e *env) writerInode(key, version string) (uint64, error) {
	out, err := e.s3.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &e.bucket, Key: &key, VersionId: &version})
	if err != nil {
		return 0, err
	}
	parts := strings.Split(out.Metadata["bucketfs-origin"], "/")
	if len(parts) < 2 {
		return 0, nil
	}
	n, _ := strconv.ParseUint(parts[1], 10, 64)
	return n, nil
}
