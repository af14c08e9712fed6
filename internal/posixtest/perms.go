package posixtest

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// PermissionsAreEnforcedForAnUnprivilegedUser: the user nobody, in a
// helper process, may read, list, search, create, write, truncate, set
// times, chmod, chown and remove only where the modes, the owners and the
// sticky bit allow, with EACCES where a permission bit is missing and EPERM
// where only the owner may; access(2) answers the same; a name the kernel
// already knows from root's use gives nobody no way around a directory it
// may not search. dir and every directory above it must be searchable by
// others.
func PermissionsAreEnforcedForAnUnprivilegedUser(t testing.TB, dir string) {
	requireRoot(t, "it acts as the user nobody on files of root")
	path := func(p string) string { return filepath.Join(dir, p) }
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := asNobody(t, "stat", dir); err != nil {
		t.Fatalf("nobody cannot reach %s (%v): every directory above it must be searchable by others", dir, err)
	}
	secret, private := path("secret"), path("private")
	writeFile(t, secret, []byte("hush\n"))
	if err := os.Chmod(secret, 0o600); err != nil {
		t.Fatal(err)
	}
	mkdir(t, private, 0o700)
	writeFile(t, path("private/inside"), []byte("in"))

	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.EACCES) {
			t.Fatalf("%s as nobody: %v; want permission denied (EACCES)", what, err)
		}
	}
	notPermitted := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.EPERM) {
			t.Fatalf("%s as nobody: %v; want operation not permitted (EPERM)", what, err)
		}
	}
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s as nobody: %v", what, err)
		}
	}

	// A 0700 directory: nobody cannot even look in.
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := asNobody(t, "list", dir)
	denied("listing of a 0700 directory of root", err)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	_, err = asNobody(t, "read", secret)
	denied("read of a 0600 file", err)
	_, err = asNobody(t, "list", private)
	denied("listing of a 0700 directory", err)
	_, err = asNobody(t, "create", path("private/new"))
	denied("create in a 0700 directory", err)
	// The kernel knows private/inside from root's write: a cached name
	// must not let nobody through a directory it may not search.
	_, err = asNobody(t, "read", path("private/inside"))
	denied("read through a 0700 directory", err)
	_, err = asNobody(t, "create", path("new"))
	denied("create in a 0755 directory of root", err)
	_, err = asNobody(t, "chmod", secret, "0666")
	notPermitted("chmod of root's file", err)

	if err := os.Chmod(secret, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o777); err != nil {
		t.Fatal(err)
	}
	out, err := asNobody(t, "read", secret)
	allowed("read of a 0644 file", err)
	if out != "hush\n" {
		t.Fatalf("nobody read %q", out)
	}
	_, err = asNobody(t, "append", secret, "more\n")
	denied("append to a 0644 file of root", err)
	out, err = asNobody(t, "list", private)
	allowed("listing of a 0777 directory", err)
	if out != "inside\n" {
		t.Fatalf("nobody listed %q", out)
	}
	_, err = asNobody(t, "create", path("private/new"))
	allowed("create in a 0777 directory", err)
	if st := stat(t, path("private/new")); st.Uid != nobody || st.Gid != nobody {
		t.Fatalf("file created by nobody is owned by %d:%d", st.Uid, st.Gid)
	}
	if got := readFile(t, secret); string(got) != "hush\n" {
		t.Fatalf("secret changed to %q", got)
	}

	_, err = asNobody(t, "access", secret, "r")
	allowed("access(R_OK) of a 0644 file", err)
	_, err = asNobody(t, "access", secret, "w")
	denied("access(W_OK) of root's 0644 file", err)
	// A file anyone may write can be rewritten in a directory nobody may
	// not write; its times may be set to now, not to an explicit time.
	open := path("open")
	writeFile(t, open, []byte("old"))
	if err := os.Chmod(open, 0o666); err != nil {
		t.Fatal(err)
	}
	_, err = asNobody(t, "write", open, "new\n")
	allowed("rewrite of a 0666 file in a 0755 directory", err)
	if got := readFile(t, open); string(got) != "new\n" {
		t.Fatalf("0666 file reads %q after nobody rewrote it", got)
	}
	_, err = asNobody(t, "touch", open)
	allowed("times set to now (UTIME_NOW) on a writable file", err)
	_, err = asNobody(t, "set-times", open, "978307200") // 2001-01-01
	notPermitted("explicit times on root's file", err)
	_, err = asNobody(t, "truncate", secret, "0")
	denied("truncate of root's 0644 file", err)
	_, err = asNobody(t, "chown", secret, "65534")
	notPermitted("chown of root's file", err)

	// In a sticky directory only the owner of an entry may remove it.
	tmp := path("tmp")
	mkdir(t, tmp, 0o777)
	if err := syscall.Chmod(tmp, syscall.S_ISVTX|0o777); err != nil {
		t.Fatal(err)
	}
	writeFile(t, tmp+"/roots", nil)
	if err := os.Chmod(tmp+"/roots", 0o666); err != nil {
		t.Fatal(err)
	}
	_, err = asNobody(t, "remove", tmp+"/roots")
	notPermitted("remove of root's file in a sticky directory", err)
	_, err = asNobody(t, "write", tmp+"/mine", "mine\n")
	allowed("create of an own file in a sticky directory", err)
	_, err = asNobody(t, "remove", tmp+"/mine")
	allowed("remove of an own file in a sticky directory", err)
}
