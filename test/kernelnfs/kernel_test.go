//go:build kernelnfs

package kernelnfs

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The guest's kernel is Debian's linux-image-6.1.0-N-amd64, fetched with
// apt-get download and unpacked with dpkg-deb -x into a cache directory
// (BUCKETFS_KERNELNFS_CACHE, default /var/tmp/bucketfs-kernelnfs), once.
// BUCKETFS_KERNELNFS_KVER picks a version; by default the newest 6.1
// package apt knows.

const (
	envCache   = "BUCKETFS_KERNELNFS_CACHE"
	envKVer    = "BUCKETFS_KERNELNFS_KVER"
	defaultDir = "/var/tmp/bucketfs-kernelnfs"
)

// guestModules are the modules the guest loads; their dependencies come
// with them.
var guestModules = []string{"virtio_pci", "virtio_net", "nfsv4"}

// kernel is an unpacked kernel package.
type kernel struct {
	version string
	root    string // where the package was unpacked
}

func (k kernel) vmlinuz() string { return filepath.Join(k.root, "boot", "vmlinuz-"+k.version) }
func (k kernel) modules() string { return filepath.Join(k.root, "lib", "modules", k.version) }

func cacheDir() string {
	if d := os.Getenv(envCache); d != "" {
		return d
	}
	return defaultDir
}

var kernelVersion = regexp.MustCompile(`^linux-image-(6\.1\.0-[0-9]+-amd64) `)

// fetchKernel returns the guest kernel, downloading and unpacking it the
// first time.
func fetchKernel(t *testing.T) kernel {
	t.Helper()
	cache := cacheDir()
	ver := os.Getenv(envKVer)
	if ver == "" {
		out, err := exec.Command("apt-cache", "search", "--names-only", `^linux-image-6\.1\.0-[0-9]+-amd64$`).Output()
		if err != nil {
			t.Fatalf("apt-cache search for the guest kernel: %v", err)
		}
		var vers []string
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if m := kernelVersion.FindStringSubmatch(sc.Text()); m != nil {
				vers = append(vers, m[1])
			}
		}
		if len(vers) == 0 {
			t.Fatalf("apt knows no linux-image-6.1.0-N-amd64 package: run apt-get update (or set %s)", envKVer)
		}
		sort.Slice(vers, func(i, j int) bool { return abiNumber(vers[i]) < abiNumber(vers[j]) })
		ver = vers[len(vers)-1]
	}
	k := kernel{version: ver, root: filepath.Join(cache, "linux-"+ver)}
	if _, err := os.Stat(k.vmlinuz()); err == nil {
		return k
	}
	dl := filepath.Join(cache, "download")
	if err := os.MkdirAll(dl, 0o755); err != nil {
		t.Fatal(err)
	}
	debs, _ := filepath.Glob(filepath.Join(dl, "linux-image-"+ver+"_*.deb"))
	if len(debs) == 0 {
		cmd := exec.Command("apt-get", "download", "linux-image-"+ver)
		cmd.Dir = dl
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("apt-get download linux-image-%s: %v\n%s", ver, err, out)
		}
		debs, _ = filepath.Glob(filepath.Join(dl, "linux-image-"+ver+"_*.deb"))
		if len(debs) == 0 {
			t.Fatalf("apt-get download left no linux-image-%s package in %s", ver, dl)
		}
	}
	tmp := k.root + ".partial"
	os.RemoveAll(tmp)
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], tmp).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x %s: %v\n%s", debs[0], err, out)
	}
	if err := os.Rename(tmp, k.root); err != nil {
		t.Fatal(err)
	}
	return k
}

// abiNumber is N of 6.1.0-N-amd64.
func abiNumber(ver string) int {
	n, _ := strconv.Atoi(strings.Split(ver, "-")[1])
	return n
}

// moduleOrder lists the files of the wanted modules and everything they
// depend on, each after its dependencies, from the depends= field of each
// module's .modinfo section (the package ships no modules.dep).
func moduleOrder(dir string, wanted []string) ([]string, error) {
	files := map[string]string{} // module name -> path
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".ko") {
			files[strings.ReplaceAll(strings.TrimSuffix(d.Name(), ".ko"), "-", "_")] = path
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	var order []string
	state := map[string]int{} // 1: being visited, 2: done
	var visit func(name string) error
	visit = func(name string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("module %s depends on itself", name)
		case 2:
			return nil
		}
		path, ok := files[name]
		if !ok {
			return fmt.Errorf("no module %s in %s", name, dir)
		}
		state[name] = 1
		deps, err := moduleDepends(path)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, path)
		return nil
	}
	for _, w := range wanted {
		if err := visit(w); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// moduleDepends reads a module's depends= from its .modinfo section.
func moduleDepends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("%s has no .modinfo", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	for _, field := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(field, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}

// cpioWriter writes a "newc" cpio archive, the format the kernel unpacks
// an initramfs from.
type cpioWriter struct {
	w   io.Writer
	ino int
	err error
}

func (c *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor int, data []byte) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	buf := append([]byte(hdr), name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	if _, c.err = c.w.Write(buf); c.err != nil {
		return
	}
	if _, c.err = c.w.Write(pad4(data)); c.err != nil {
		return
	}
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func (c *cpioWriter) close() error {
	c.entry("TRAILER!!!", 0, 0, 0, nil)
	return c.err
}

// buildInitramfs writes the guest's initramfs: the guest test binary as
// /init, /dev/console (the kernel opens it for init before devtmpfs is
// mounted), the modules under /lib/modules and their load order in
// /modules.order.
func buildInitramfs(t *testing.T, k kernel, guestBinary, out string) {
	t.Helper()
	mods, err := moduleOrder(k.modules(), guestModules)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	c := &cpioWriter{w: bw}
	for _, d := range []string{"dev", "proc", "sys", "tmp", "mnt", "lib", "lib/modules"} {
		c.entry(d, 0o040755, 0, 0, nil)
	}
	c.entry("dev/console", 0o020600, 5, 1, nil)
	init, err := os.ReadFile(guestBinary)
	if err != nil {
		t.Fatal(err)
	}
	c.entry("init", 0o100755, 0, 0, init)
	var order []string
	for _, m := range mods {
		data, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		name := "lib/modules/" + filepath.Base(m)
		if slices.Contains(order, name) {
			continue
		}
		c.entry(name, 0o100644, 0, 0, data)
		order = append(order, name)
	}
	c.entry("modules.order", 0o100644, 0, 0, []byte(strings.Join(order, "\n")+"\n"))
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		t.Fatal(err)
	}
}
