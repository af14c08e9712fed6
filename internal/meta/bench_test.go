package meta

import (
	"context"
	"fmt"
	"syscall"
	"testing"
)

// benchDir makes a directory of n files and returns its inode number.
func benchDir(b *testing.B, n int) (*Store, Ino) {
	b.Helper()
	s := openStoreB(b)
	ctx := context.Background()
	d, err := s.Create(ctx, RootIno, "d", Inode{Mode: syscall.S_IFDIR | 0o755}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := s.Create(ctx, d.Ino, fmt.Sprintf("file-%06d", i), Inode{Mode: syscall.S_IFREG | 0o644}, nil); err != nil {
			b.Fatal(err)
		}
	}
	return s, d.Ino
}

func BenchmarkLookup(b *testing.B) {
	s, d := benchDir(b, 1000)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Lookup(ctx, d, fmt.Sprintf("file-%06d", i%1000)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadDir1000(b *testing.B) {
	s, d := benchDir(b, 1000)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		ents, err := s.ReadDir(ctx, d, "", 1024)
		if err != nil || len(ents) != 1000 {
			b.Fatal(len(ents), err)
		}
	}
}

func BenchmarkCreate(b *testing.B) {
	s := openStoreB(b)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Create(ctx, RootIno, fmt.Sprintf("f%d", i), Inode{Mode: syscall.S_IFREG | 0o644}, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteUpdate(b *testing.B) {
	s := openStoreB(b)
	ctx := context.Background()
	f, err := s.Create(ctx, RootIno, "f", Inode{Mode: syscall.S_IFREG | 0o644}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		if _, err := s.Update(ctx, f.Ino, func(in *Inode) (Change, error) {
			in.Size = int64(i)
			return DataChange, nil
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWithin16 is the check an NFS PUTFH of an access point's handle
// makes (is this file still under the root?) for a file 16 directories
// below the root.
func BenchmarkWithin16(b *testing.B) {
	s := openStoreB(b)
	ctx := context.Background()
	dir := RootIno
	for i := 0; i < 16; i++ {
		d, err := s.Create(ctx, dir, fmt.Sprintf("level-%d", i), Inode{Mode: syscall.S_IFDIR | 0o755}, nil)
		if err != nil {
			b.Fatal(err)
		}
		dir = d.Ino
	}
	f, err := s.Create(ctx, dir, "f", Inode{Mode: syscall.S_IFREG | 0o644}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if ok, err := s.Within(ctx, f.Ino, RootIno+2); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
