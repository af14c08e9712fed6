package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The NFS identity is made once and read back the same at every start; a
// file that holds no identity is refused with a message that names it,
// never replaced silently (its clients' claims would go with it).
func TestTheNFSIdentityIsMadeOnceAndKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), nfsIdentityFile)
	first, err := loadOrMakeIdentity(path)
	if err != nil || first == 0 {
		t.Fatalf("made %x, %v", first, err)
	}
	again, err := loadOrMakeIdentity(path)
	if err != nil || again != first {
		t.Fatalf("read back %x, %v; want %x", again, err, first)
	}
	if _, err := os.Stat(path + ".new"); !os.IsNotExist(err) {
		t.Errorf("the temporary file is left: %v", err)
	}
	for _, bad := range []string{"", "not hex\n", "0000000000000000\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if id, err := loadOrMakeIdentity(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("identity file %q gave %x, %v; want an error naming the file", bad, id, err)
		}
	}
}
