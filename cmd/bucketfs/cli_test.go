package main

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// `bucketfs version` names the source it was built from (issue 13): the
// revision the build info carries (TestMain builds with -buildvcs=auto, so
// a git checkout's binary has one).
func TestVersionNamesTheRevision(t *testing.T) {
	info, err := exec.Command("go", "version", "-m", binary).Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`vcs\.revision=([0-9a-f]+)`).FindSubmatch(info)
	out, err := exec.Command(binary, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "bucketfs ") || !strings.Contains(string(out), ", go1.") {
		t.Errorf("bucketfs version: %q", out)
	}
	if m == nil {
		if _, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil && os.Getenv("GOFLAGS") == "" {
			t.Logf("a git checkout, but the build carries no revision (GOFLAGS or go env turn -buildvcs off?)")
		}
		return
	}
	want := string(m[1])[:12]
	if !strings.Contains(string(out), "revision "+want) || !regexp.MustCompile(`committed \d{4}-\d\d-\d\d`).Match(out) {
		t.Errorf("bucketfs version: %q, want revision %s and the commit time", out, want)
	}
}

// A bad flag or value is one line that says what is wrong and how to write
// it, not the whole usage (issue 13); help goes to stdout.
func TestFlagErrorsAreOneLineWithAnExample(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mount", "--export-delay", "5minutes", "/mnt"}, `invalid value "5minutes" for --export-delay: not a duration: write it like 30s, 5m or 1h`},
		{[]string{"mount", "--poll-interval", "-1s", "/mnt"}, "--poll-interval: must not be negative (0 means never)"},
		{[]string{"serve", "--checkpoint-interval", "-5s"}, "--checkpoint-interval: must not be negative (0 means only on fsync)"},
		{[]string{"mount", "--revalidate-ttl", "-1s", "/mnt"}, "--revalidate-ttl: must not be negative"},
		{[]string{"mount", "--export-delay", "0s", "/mnt"}, "--export-delay: must be positive"},
		{[]string{"mount", "--tier-capacity", "lots", "/mnt"}, "not a size: write it like 128KiB"},
		{[]string{"mount", "--log-level", "loud", "/mnt"}, `--log-level "loud": use debug, info, warn or error`},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:9", "/mnt"}, "--endpoint needs --bucket"},
		{[]string{"mount", "--no-such-flag", "/mnt"}, "unknown flag --no-such-flag"},
		{[]string{"status", "--export-delay", "x"}, "not a duration"},
	} {
		var stderr bytes.Buffer
		cmd := exec.Command(binary, tc.args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		msg := stderr.String()
		if err == nil || !strings.Contains(msg, tc.want) || strings.Count(msg, "\n") != 1 || strings.Contains(msg, "parse error") || strings.Contains(msg, "slog") {
			t.Errorf("bucketfs %v: %v\n%s\nwant one line containing %q", tc.args, err, msg, tc.want)
		}
	}
	out, err := exec.Command(binary, "mount", "--help").Output()
	if err != nil || !strings.Contains(string(out), "usage: bucketfs mount [flags] MOUNTPOINT") ||
		!strings.Contains(string(out), "example:") || !strings.Contains(string(out), "--import-threshold SIZE") ||
		!strings.Contains(string(out), "(default 128KiB)") {
		t.Errorf("mount --help on stdout: %v\n%s", err, out)
	}
}
