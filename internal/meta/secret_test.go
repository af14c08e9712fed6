package meta

import (
	"bytes"
	"context"
	"testing"
	"time"

	"bucketfs/internal/kv/kvreplay"
	"bucketfs/internal/kv/testkv"
)

func TestASecretIsMadeOnceAndOutlivesARestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() (*Store, func()) {
		db, err := testkv.Open(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		db = kvreplay.FromEnv(t, db)
		s, err := Open(ctx, db, Options{ExportDelay: time.Minute})
		if err != nil {
			db.Close()
			t.Fatal(err)
		}
		return s, func() { db.Close() }
	}
	s, closeDB := open()
	a, err := s.Secret(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Secret(ctx, "other")
	if err != nil {
		closeDB()
		t.Fatal(err)
	}
	if len(a) != secretSize || bytes.Equal(a, b) || bytes.Equal(a, make([]byte, secretSize)) {
		t.Errorf("secrets %x and %x: want two different random %d-byte values", a, b, secretSize)
	}
	again, _ := s.Secret(ctx, "one")
	closeDB()
	if !bytes.Equal(a, again) {
		t.Errorf("asked twice, the secret changed: %x then %x", a, again)
	}
	s, closeDB = open()
	defer closeDB()
	after, err := s.Secret(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, after) {
		t.Errorf("after a restart the secret is %x, was %x", after, a)
	}
}
