//go:build kernelnfs

package guest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The guest's init: this test binary is /init of the initramfs that
// test/kernelnfs builds, so it runs as pid 1 on a kernel that has nothing
// mounted and no network. setUp makes the machine the tests need: the
// kernel's file systems, the modules for the virtio network card and the
// NFS client (listed in load order in /modules.order by the host), and the
// network card's address on QEMU's user-mode network.

// Where the guest is on QEMU's user-mode network, and where the host's
// servers appear (guestfwd), as the host's test sets them up.
const (
	guestAddr  = "10.0.2.15"
	serverAddr = "10.0.2.100"
)

func setUp() error {
	for _, m := range []struct{ src, dir, fstype string }{
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"},
		{"tmpfs", "/tmp", "tmpfs"},
	} {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dir, m.fstype, 0, ""); err != nil && err != unix.EBUSY {
			return fmt.Errorf("mount %s: %w", m.dir, err)
		}
	}
	// The unprivileged user's workload reports on the second serial port
	// too.
	if err := os.Chmod("/dev/ttyS1", 0o666); err != nil {
		return err
	}
	if err := loadModules("/modules.order"); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte("kernelnfs-guest")); err != nil {
		return err
	}
	if err := linkUp("lo", "127.0.0.1", 8); err != nil {
		return err
	}
	// The network card appears once virtio_net has probed it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := linkUp("eth0", guestAddr, 24)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("eth0: %w", err)
		}
		time.Sleep(100 * time.Millisecond) // waiting for a device, not for a test's event
	}
}

// loadModules loads each module listed in order (dependencies first).
func loadModules(order string) error {
	f, err := os.Open(order)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		path := filepath.Join("/", strings.TrimSpace(sc.Text()))
		mod, err := os.Open(path)
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(mod.Fd()), "", 0)
		mod.Close()
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("load %s: %w", path, err)
		}
	}
	return sc.Err()
}

// linkUp gives a network interface an IPv4 address and brings it up.
func linkUp(name, addr string, prefixLen int) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var ip [4]byte
	if _, err := fmt.Sscanf(addr, "%d.%d.%d.%d", &ip[0], &ip[1], &ip[2], &ip[3]); err != nil {
		return err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := ifr.SetInet4Addr(ip[:]); err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFADDR, ifr); err != nil {
		return fmt.Errorf("set address: %w", err)
	}
	mask := ^uint32(0) << (32 - prefixLen)
	if err := ifr.SetInet4Addr([]byte{byte(mask >> 24), byte(mask >> 16), byte(mask >> 8), byte(mask)}); err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFNETMASK, ifr); err != nil {
		return fmt.Errorf("set netmask: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// powerOff ends the guest; QEMU exits with it.
func powerOff() {
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	// If that failed, init's exit panics the kernel, which (panic=-1,
	// -no-reboot) ends QEMU too.
	os.Exit(1)
}
