package meta

import (
	"context"
	"errors"
	"maps"
	"testing"

	"bucketfs/internal/kv"
)

// Each NFS server's client records are its own: one server's records are
// neither read nor changed through another's identity.
func TestClientRecordsOfTwoNFSServersAreKeptApart(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	if err := s.PutClientRecord(ctx, 1, "4.1:a", []byte("ra")); err != nil {
		t.Fatal(err)
	}
	if err := s.ChangeClientRecords(ctx, 2, map[string][]byte{"4.1:a": []byte("rb"), "": []byte("stop")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteClientRecord(ctx, 2, "4.1:a"); err != nil {
		t.Fatal(err)
	}
	one, err := s.ClientRecords(ctx, 1)
	if err != nil || !maps.EqualFunc(one, map[string][]byte{"4.1:a": []byte("ra")}, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Fatalf("records of server 1: %q, %v; want only its own 4.1:a", one, err)
	}
	two, err := s.ClientRecords(ctx, 2)
	if err != nil || len(two) != 1 || string(two[""]) != "stop" {
		t.Fatalf("records of server 2: %q, %v; want only its stop record", two, err)
	}
	servers, err := s.ClientRecordServers(ctx)
	if err != nil || !maps.Equal(servers, map[uint64]int{1: 1, 2: 1}) {
		t.Fatalf("servers with records: %v, %v; want 1 and 2 with one each", servers, err)
	}
}

// The records of a gone server are deleted only as they were read: a
// record written since keeps them all.
func TestTheRecordsOfAGoneServerAreDeletedOnlyIfUnchanged(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	if err := s.ChangeClientRecords(ctx, 7, map[string][]byte{"4.0:x": []byte("1"), "4.1:y": []byte("2")}, nil); err != nil {
		t.Fatal(err)
	}
	seen, err := s.ClientRecords(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutClientRecord(ctx, 7, "4.1:y", []byte("renewed")); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteClientRecordsOf(ctx, 7, seen); !errors.Is(err, ErrClientRecordsChanged) {
		t.Fatalf("delete after a change: %v; want ErrClientRecordsChanged", err)
	}
	if now, _ := s.ClientRecords(ctx, 7); len(now) != 2 {
		t.Fatalf("records after a refused delete: %q; want both", now)
	}
	seen, _ = s.ClientRecords(ctx, 7)
	if err := s.DeleteClientRecordsOf(ctx, 7, seen); err != nil {
		t.Fatal(err)
	}
	if now, _ := s.ClientRecords(ctx, 7); len(now) != 0 {
		t.Fatalf("records after the delete: %q; want none", now)
	}
}

// Records of the earlier single-server form (n<owner>) go to the first
// server that adopts them, all of them, and to no later one; a record the
// adopter has already for an owner is kept.
func TestLegacyClientRecordsAreAdoptedByTheFirstServerOnly(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	if err := s.kv.Update(ctx, func(tx kv.Txn) error {
		for owner, v := range map[string]string{"4.1:a": "old-a", "4.0:b": "old-b", "": "stop"} {
			if err := tx.Set(append([]byte{pLegacyClient}, owner...), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutClientRecord(ctx, 3, "4.1:a", []byte("new-a")); err != nil {
		t.Fatal(err)
	}
	if n, err := s.AdoptLegacyClientRecords(ctx, 3); err != nil || n != 2 {
		t.Fatalf("adopted %d, %v; want 2 (4.1:a is the server's already)", n, err)
	}
	got, _ := s.ClientRecords(ctx, 3)
	want := map[string]string{"4.1:a": "new-a", "4.0:b": "old-b", "": "stop"}
	if len(got) != len(want) {
		t.Fatalf("records of the adopter: %q; want %q", got, want)
	}
	for k, v := range want {
		if string(got[k]) != v {
			t.Fatalf("records of the adopter: %q; want %q", got, want)
		}
	}
	if n, err := s.AdoptLegacyClientRecords(ctx, 4); err != nil || n != 0 {
		t.Fatalf("a second server adopted %d, %v; want none", n, err)
	}
}
