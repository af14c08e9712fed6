package accesspoint

import (
	"context"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/kv/kvreplay"
	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

func TestParseReadsTheFlagSyntax(t *testing.T) {
	for _, c := range []struct {
		in   string
		want AccessPoint
	}{
		{"team-a=/teams/a,uid=2001,gid=2001",
			AccessPoint{Name: "team-a", Path: "/teams/a", Cred: vfs.Cred{Uid: 2001, Gid: 2001}, Mode: 0o755}},
		{"b=/teams//b/,uid=0,gid=5,groups=7:8,mode=2770",
			AccessPoint{Name: "b", Path: "/teams/b", Cred: vfs.Cred{Uid: 0, Gid: 5, Groups: []uint32{7, 8}}, Mode: 0o2770}},
		{"all=/,mode=0700,gid=1,uid=1",
			AccessPoint{Name: "all", Path: "/", Cred: vfs.Cred{Uid: 1, Gid: 1}, Mode: 0o700}},
	} {
		got, err := Parse(c.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", c.in, got, c.want)
		}
		// String gives back what Parse reads.
		again, err := Parse(got.String())
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("Parse(%q.String() = %q) = %+v, %v", c.in, got.String(), again, err)
		}
	}
}

func TestParseRefusesBadInputWithOneLine(t *testing.T) {
	for _, c := range []struct {
		in, want string // want: a part of the error
	}{
		{"team-a", "want NAME=PATH"},
		{"=/x,uid=1,gid=1", "empty access point name"},
		{"a/b=/x,uid=1,gid=1", "has a '/'"},
		{"..=/x,uid=1,gid=1", "is not a name"},
		{"a b=/x,uid=1,gid=1", "only letters"},
		{"a=x,uid=1,gid=1", "not absolute"},
		{"a=,uid=1,gid=1", "not absolute"},
		{"a=/x/../y,uid=1,gid=1", `".." component`},
		{"a=/x,gid=1", "uid= is required"},
		{"a=/x,uid=1", "gid= is required"},
		{"a=/x,uid=1,gid=1,owner=3", `unknown key "owner"`},
		{"a=/x,uid=1,gid=1,uid=2", "uid given twice"},
		{"a=/x,uid=-1,gid=1", "uid="},
		{"a=/x,uid=4294967295,gid=1", "uid="},
		{"a=/x,uid=1,gid=one", "gid="},
		{"a=/x,uid=1,gid=1,groups=", "groups= is empty"},
		{"a=/x,uid=1,gid=1,groups=1::2", "groups="},
		{"a=/x,uid=1,gid=1,mode=0789", "mode="},
		{"a=/x,uid=1,gid=1,mode=17777", "mode="},
		{"a=/x,uid=1,gid=1,ro", "not KEY=VALUE"},
	} {
		_, err := Parse(c.in)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", c.in)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
			t.Errorf("Parse(%q) = %q, want one line with %q", c.in, msg, c.want)
		}
	}
}

func TestAListRefusesANameGivenTwice(t *testing.T) {
	var l List
	if err := l.Set("a=/x,uid=1,gid=1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Set("b=/x,uid=2,gid=2"); err != nil {
		t.Fatal(err)
	}
	if err := l.Set("a=/y,uid=1,gid=1"); err == nil || !strings.Contains(err.Error(), `"a" defined twice`) {
		t.Fatalf("a duplicate name: %v", err)
	}
	if len(l) != 2 {
		t.Fatalf("list holds %d access points, want 2", len(l))
	}
}

func newFS(t *testing.T) *vfs.FS {
	t.Helper()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	db = kvreplay.FromEnv(t, db)
	t.Cleanup(func() { db.Close() })
	m, err := meta.Open(context.Background(), db, meta.Options{ExportDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return vfs.New(m, nil, nil, vfs.Config{})
}

// The root is made with the access point's owner and mode, the directories
// above it root's with 0755; a root that exists is kept as it is; a path
// through a file is an error.
func TestRootIsMadeWithItsOwnerAndModeAndKeptWhenItExists(t *testing.T) {
	ctx := context.Background()
	fs := newFS(t)
	ap, err := Parse("team-a=/teams/a,uid=2001,gid=3001,mode=2750")
	if err != nil {
		t.Fatal(err)
	}
	root, err := ap.Root(ctx, fs)
	if err != nil {
		t.Fatal(err)
	}
	if root.Mode != syscall.S_IFDIR|0o2750 || root.Uid != 2001 || root.Gid != 3001 {
		t.Errorf("root made with mode %o owner %d:%d, want %o 2001:3001", root.Mode, root.Uid, root.Gid, syscall.S_IFDIR|0o2750)
	}
	teams, err := fs.Lookup(ctx, vfs.Root, meta.RootIno, "teams")
	if err != nil {
		t.Fatal(err)
	}
	if teams.Mode != syscall.S_IFDIR|0o755 || teams.Uid != 0 || teams.Gid != 0 {
		t.Errorf("parent made with mode %o owner %d:%d, want 0755 root", teams.Mode, teams.Uid, teams.Gid)
	}

	// Again, with another owner and mode: the root is the same, untouched.
	ap2, _ := Parse("other=/teams/a,uid=1,gid=1,mode=0700")
	again, err := ap2.Root(ctx, fs)
	if err != nil {
		t.Fatal(err)
	}
	if again.Ino != root.Ino || again.Mode != root.Mode || again.Uid != 2001 {
		t.Errorf("an existing root changed: %+v, was %+v", again, root)
	}

	whole, _ := Parse("all=/,uid=1,gid=1")
	if r, err := whole.Root(ctx, fs); err != nil || r.Ino != meta.RootIno {
		t.Errorf("the root of PATH=/ is %d, %v", r.Ino, err)
	}

	_, h, err := fs.Create(ctx, vfs.Root, teams.Ino, "file", 0o644, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	bad, _ := Parse("bad=/teams/file/x,uid=1,gid=1")
	if _, err := bad.Root(ctx, fs); err == nil || !strings.Contains(err.Error(), "/teams/file") {
		t.Errorf("a root below a file: %v", err)
	}
	notDir, _ := Parse("bad=/teams/file,uid=1,gid=1")
	if _, err := notDir.Root(ctx, fs); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a root that is a file: %v", err)
	}
}
