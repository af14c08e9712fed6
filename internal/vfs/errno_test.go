package vfs

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"bucketfs/internal/bucket"
)

// Errors of the store map to EIO whatever socket errno they carry (issue
// 12: a read failed with ECONNRESET, the network's errno, instead of EIO);
// the file system's own errnos pass through.
func TestErrnoOfAStoreErrorIsEIOWhateverTheSocketSaid(t *testing.T) {
	sock := func(errno syscall.Errno) error {
		return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", errno)}
	}
	for _, tc := range []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"unavailable after resets", fmt.Errorf("bucket: get s3://b/k: %w: %w", bucket.ErrUnavailable, sock(syscall.ECONNRESET)), syscall.EIO},
		{"unavailable after refusals", fmt.Errorf("bucket: head s3://b/k: %w: %w", bucket.ErrUnavailable, sock(syscall.ECONNREFUSED)), syscall.EIO},
		{"a socket error the store layer did not classify", fmt.Errorf("bucket: get s3://b/k: %w", sock(syscall.EPIPE)), syscall.EIO},
		{"the operation's deadline", fmt.Errorf("read: %w", context.DeadlineExceeded), syscall.EIO},
		{"vanished object", fmt.Errorf("bucket: get: %w", bucket.ErrNotFound), syscall.EIO},
		{"a file system errno", fmt.Errorf("create: %w", syscall.EEXIST), syscall.EEXIST},
		{"a full disk", fmt.Errorf("write block: %w", syscall.ENOSPC), syscall.ENOSPC},
	} {
		if got := Errno(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
