// Package kernelnfs tests bucketfs's NFS server through the Linux kernel's
// own NFS client, the client users mount with.
//
// This machine's kernel has no NFS client, so the test boots one: a Debian
// Linux 6.1 kernel (the linux-image-6.1.0-N-amd64 package, downloaded and
// unpacked, never installed) under QEMU, with an initramfs the test builds
// from the kernel's own modules (virtio network card, sunrpc, nfs, nfsv4)
// and the guest test binary (test/kernelnfs/guest) as /init. The guest's
// network is QEMU's user-mode network with restrict=on: it reaches nothing
// but the forwarded ports, each joined to a listener on this host's
// loopback by a relay process per connection (this test binary again):
// four `bucketfs serve` and a control port through which the guest has the
// host restart, kill or start a server at a chosen moment.
//
// Two of the servers serve one file system, its metadata in a PostgreSQL
// database the host test starts (pgtest) and its bucket in the test
// binary's own store: the guest mounts both (4.1 and 4.2, 4.0 and 4.1,
// 4.2 and 4.0) and checks through the kernel client that they are one file system
// (close-to-open, names, locks and flock across servers, a kill -9 of one).
// The other two are single servers on the embedded store: one with
// default flags (root squashed, AUTH_NONE refused for everything but the
// NULL ping), where the guest
// mounts at each NFS minor version and mount option set, works as an
// unprivileged user and checks root squash; and one with
// --root-squash=false, where the guest runs the POSIX conformance workloads
// (internal/posixtest) as root, then holds an open file with unsent
// writes and a lock across a SIGTERM restart and a kill -9 of that server
// (4.1 and 4.2; 4.0 too with -kernelnfs.long). When the guest has powered
// off, the host flushes the default server and the shared pair and checks
// their buckets object by object against what the guest reported writing
// (second serial port).
//
// Run it with
//
//	go test -tags kernelnfs -count=1 -timeout 30m ./test/kernelnfs/
//
// (.ci/run does, after installing qemu-system-x86 and PostgreSQL);
// -kernelnfs.run PATTERN runs only the guest tests that match. -kernelnfs.long adds
// mount option sets and the longer workloads. Without KVM (as here) the
// guest CPU is emulated and every NFS round trip costs milliseconds: the
// test checks behaviour, never speed.
package kernelnfs
