package fuse_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"bucketfs/internal/engine"
	bfuse "bucketfs/internal/frontend/fuse"
	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3test"
)

// postgresMounts starts two servers of one file system on a real
// PostgreSQL (each its own engine, pool and state directory, as on two
// hosts) and one bucket, and mounts each with kernel caches of an hour:
// what one mount sees of the other's changes within the tests' deadlines
// comes from the change log's pushed invalidations, not from timeouts.
func postgresMounts(t *testing.T) (a, b string, ea, eb *engine.Engine) {
	t.Helper()
	a, b, ea, eb, _ = postgresMountsOn(t, pgtest.Start(t))
	return a, b, ea, eb
}

// postgresMountsOn is postgresMounts on the PostgreSQL server pg, which it
// also returns.
func postgresMountsOn(t *testing.T, pg *pgtest.Server) (a, b string, ea, eb *engine.Engine, _ *pgtest.Server) {
	t.Helper()
	url := pg.NewDatabase(t)
	srv, bucketName := s3test.NewBucket(t)
	open := func() (*engine.Engine, string) {
		e, err := engine.Open(context.Background(), engine.Config{StateDir: t.TempDir(), Meta: url,
			Bucket: bucketName, Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region,
			ExportDelay: time.Hour, PollInterval: -1, RevalidateTTL: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		e.Start()
		mnt := t.TempDir()
		fsrv, err := bfuse.Mount(e.FS, mnt, bfuse.Options{Name: "bucketfs-test", AttrTimeout: time.Hour, EntryTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := fsrv.Unmount(); err != nil {
				t.Errorf("unmount: %v", err)
			}
		})
		return e, mnt
	}
	ea, a = open()
	eb, b = open()
	return a, b, ea, eb, pg
}

// Two servers on PostgreSQL are one file system: a file written and
// closed through one reads back whole through the other; a change of
// size and a rename through one show through the other's mount although
// its kernel caches names and attributes for an hour; and a lock through
// one conflicts through the other.
func TestTwoServersOnPostgreSQLAreOneFileSystem(t *testing.T) {
	a, b, _, _ := postgresMounts(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 40_000) // 640 KB: many blocks
	if err := os.WriteFile(filepath.Join(a, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(b, "f"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read through b: %d bytes, %v; want the %d written through a", len(got), err, len(data))
	}

	// b's kernel now caches f's attributes; a grows f.
	f, err := os.OpenFile(filepath.Join(a, "f"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("tail")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	eventually(t, "b to see the size a's append made", func() bool {
		st, err := os.Stat(filepath.Join(b, "f"))
		return err == nil && st.Size() == int64(len(data)+4)
	})

	if err := os.Rename(filepath.Join(a, "f"), filepath.Join(a, "g")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b to see the rename", func() bool {
		_, errOld := os.Stat(filepath.Join(b, "f"))
		_, errNew := os.Stat(filepath.Join(b, "g"))
		return errors.Is(errOld, os.ErrNotExist) && errNew == nil
	})

	fa, err := os.OpenFile(filepath.Join(a, "g"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := os.OpenFile(filepath.Join(b, "g"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	if _, err := fcntlLock(fa, unix.F_SETLK, unix.F_WRLCK, 0, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := fcntlLock(fb, unix.F_SETLK, unix.F_WRLCK, 5, 10); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("a write lock through b over a's = %v, want EAGAIN", err)
	}
}
