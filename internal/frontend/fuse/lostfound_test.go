package fuse_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A file saved in lost+found after a conflict keeps its owner and mode,
// and its owner reaches it: lost+found is shared as /tmp is (01777), so
// the owner reads the saved copy and may remove it, while another user
// is kept out by the file's own mode and by the sticky bit.
func TestAFileSavedInLostFoundKeepsItsOwnerAndModeAndItsOwnerCanReadAndRemoveIt(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
	forwardEvents(e)
	openMount(t, e)
	owner := syscall.Credential{Uid: 1000, Gid: 1000}

	e.put("doc.txt", []byte("base"), nil)
	if !readsAs(e.path("doc.txt"), []byte("base")) {
		t.Fatal("unreadable")
	}
	writeFile(t, e.path("doc.txt"), []byte("the owner's edit")) // dirty for an hour
	chown(t, e.path("doc.txt"), 1000, 1000, 0o640)
	e.put("doc.txt", []byte("bucket side edit"), nil)
	eventually(t, "the bucket's version to win", func() bool {
		return readsAs(e.path("doc.txt"), []byte("bucket side edit"))
	})
	lfDir := e.path(e.eng.Meta.LostFoundName())
	names := e.lostFound()
	if len(names) != 1 || !strings.HasPrefix(names[0], "doc.txt.") {
		t.Fatalf("lost+found holds %v", names)
	}
	saved := lfDir + "/" + names[0]

	if out, err := runAs(owner, "cat", saved); err != nil || out != "the owner's edit" {
		t.Fatalf("the owner reads %q (%v)", out, err)
	}
	st, err := os.Stat(lfDir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&(os.ModePerm|os.ModeSticky) != os.ModeSticky|0o777 {
		t.Fatalf("lost+found is %v, want drwxrwxrwt", st.Mode())
	}
	st, err = os.Stat(saved)
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1000 || sys.Gid != 1000 || st.Mode().Perm() != 0o640 {
		t.Fatalf("saved copy is %v uid %d gid %d, want -rw-r----- 1000 1000", st.Mode(), sys.Uid, sys.Gid)
	}

	if out, err := runAs(outsider, "cat", saved); err == nil || !strings.Contains(out, "Permission denied") {
		t.Fatalf("another user read the saved copy: %q (%v)", out, err)
	}
	if out, err := runAs(outsider, "rm", "-f", saved); err == nil || !strings.Contains(out, "not permitted") {
		t.Fatalf("another user removed the saved copy: %q (%v)", out, err)
	}
	if out, err := runAs(owner, "rm", saved); err != nil {
		t.Fatalf("the owner cannot remove the saved copy: %q (%v)", out, err)
	}
	if names := e.lostFound(); len(names) != 0 {
		t.Fatalf("lost+found still holds %v", names)
	}
}
