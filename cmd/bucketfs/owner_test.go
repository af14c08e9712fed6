package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A bad --uid, --gid, --file-mode or --dir-mode is one line saying what is
// wrong and how to write it (issue 13).
func TestOwnerAndModeFlagErrorsAreOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mount", "--file-mode", "rw-r--r--", "/mnt"}, `invalid value "rw-r--r--" for --file-mode: not an octal mode: write it like 0644 or 0755`},
		{[]string{"mount", "--file-mode", "0999", "/mnt"}, "--file-mode: not an octal mode"},
		{[]string{"serve", "--dir-mode", "017777"}, "--dir-mode: not a permission mode: at most 07777"},
		{[]string{"mount", "--dir-mode", "", "/mnt"}, "--dir-mode: not an octal mode"},
		{[]string{"mount", "--uid", "alice", "/mnt"}, `invalid value "alice" for --uid: not a numeric id: write it like 1000`},
		{[]string{"serve", "--gid", "-1"}, "--gid: not a numeric id"},
		{[]string{"mount", "--uid", "4294967296", "/mnt"}, "--uid: not a numeric id"},
	} {
		var stderr bytes.Buffer
		cmd := exec.Command(binary, tc.args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		msg := stderr.String()
		if err == nil || !strings.Contains(msg, tc.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("bucketfs %q: %v\n%s\nwant one line containing %q", tc.args, err, msg, tc.want)
		}
	}
	out, err := exec.Command(binary, "mount", "--help").Output()
	for _, want := range []string{"--uid ID", "--gid ID", "--file-mode MODE", "(default 0644)", "--dir-mode MODE", "(default 0755)",
		"(default: the user running bucketfs)"} {
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("mount --help: %v, lacks %q:\n%s", err, want, out)
		}
	}
}

// The flags reach the engine's configuration: octal modes, numeric ids
// (the user running bucketfs when none is given), and --read-only.
func TestOwnerModeAndReadOnlyFlagsReachTheEngine(t *testing.T) {
	for _, tc := range []struct {
		args                        []string
		uid, gid, fileMode, dirMode uint32
		readOnly                    bool
	}{
		{nil, uint32(os.Getuid()), uint32(os.Getgid()), 0o644, 0o755, false},
		{[]string{"--uid", "1000", "--gid", "100", "--file-mode", "0640", "--dir-mode", "750"}, 1000, 100, 0o640, 0o750, false},
		{[]string{"--file-mode", "0o600", "--dir-mode", "1777", "--read-only"}, uint32(os.Getuid()), uint32(os.Getgid()), 0o600, 0o1777, true},
	} {
		fset := flag.NewFlagSet("mount", flag.ContinueOnError)
		var o options
		o.register(fset)
		if err := parseFlags(fset, tc.args, io.Discard, command{name: "mount"}); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		cfg, err := o.engineConfig(nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ReadOnly != tc.readOnly {
			t.Errorf("%q: read-only %v", tc.args, cfg.ReadOnly)
		}
		d := cfg.Defaults
		if d == nil || d.Uid != tc.uid || d.Gid != tc.gid || d.FileMode != tc.fileMode || d.DirMode != tc.dirMode {
			t.Errorf("%q: defaults %+v, want uid %d gid %d file %o dir %o", tc.args, d, tc.uid, tc.gid, tc.fileMode, tc.dirMode)
		}
	}
}
