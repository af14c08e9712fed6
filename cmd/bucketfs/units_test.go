package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The systemd units in deploy/systemd call commands and flags that exist
// (a renamed flag would otherwise break them unnoticed), and show where the
// bucket's credentials go (issue 22).
func TestTheSystemdUnitsUseCommandsAndFlagsThatExist(t *testing.T) {
	// From this file's directory: a test that started the in-process
	// store has moved the working directory (s3local's doc).
	_, here, _, _ := runtime.Caller(0)
	units, _ := filepath.Glob(filepath.Join(filepath.Dir(here), "../../deploy/systemd/*.service"))
	if len(units) < 2 {
		t.Fatalf("units found: %v", units)
	}
	flagRE := regexp.MustCompile(`--[a-z][a-z0-9-]*`)
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "Type=notify") {
			t.Errorf("%s is not Type=notify", u)
		}
		if !regexp.MustCompile(`(?m)^#?EnvironmentFile=/`).Match(b) {
			t.Errorf("%s does not show where the bucket's credentials go (an EnvironmentFile= line)", u)
		}
		for _, line := range strings.Split(string(b), "\n") {
			cmdline, ok := strings.CutPrefix(line, "ExecStart=")
			if !ok {
				cmdline, ok = strings.CutPrefix(line, "ExecStop=")
			}
			if !ok {
				continue
			}
			_, fields := execCommand(cmdline)
			if len(fields) < 2 || filepath.Base(fields[0]) != "bucketfs" {
				t.Errorf("%s: %q does not run bucketfs", u, line)
				continue
			}
			help, err := exec.Command(binary, fields[1], "--help").Output()
			if err != nil {
				t.Errorf("%s: bucketfs %s --help: %v", u, fields[1], err)
				continue
			}
			for _, f := range flagRE.FindAllString(cmdline, -1) {
				if !strings.Contains(string(help), "  "+f+" ") && !strings.Contains(string(help), "  "+f+"\n") {
					t.Errorf("%s: bucketfs %s has no flag %s", u, fields[1], f)
				}
			}
		}
	}
}

// execCommand splits a unit's Exec*= value into systemd's prefixes ("-":
// a failure is ignored, "@", "+", "!", ":") and the command line.
func execCommand(value string) (ignoreFailure bool, fields []string) {
	v := strings.TrimLeft(value, "-@+!:")
	return strings.Contains(value[:len(value)-len(v)], "-"), strings.Fields(v)
}

// unitSettings reads the [Service] keys of a unit file.
func unitSettings(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(k, "#") {
			out[k] = append(out[k], v)
		}
	}
	return out
}

// The mount unit's stop path ends bucketfs even while a process holds the
// mount (issue 22), done as systemd does it: each ExecStop= (a failure
// fails the stop unless the line says "-"), then KillSignal= (SIGTERM) to
// the main process unless KillMode=none; and TimeoutStopSec= leaves
// bucketfs the time its stop may take, so that systemd never ends it with
// SIGKILL, which would leave a dead mount.
func TestTheMountUnitStopsABusyMountWithoutLeavingItDead(t *testing.T) {
	_, here, _, _ := runtime.Caller(0) // not the working directory: the in-process store may change it
	unit := unitSettings(t, filepath.Join(filepath.Dir(here), "../../deploy/systemd/bucketfs-mount.service"))
	if len(unit["ExecStart"]) != 1 {
		t.Fatalf("the mount unit's ExecStart: %q", unit["ExecStart"])
	}
	_, start := execCommand(unit["ExecStart"][0])
	mnt := start[len(start)-1]
	timeout, err := time.ParseDuration(strings.ReplaceAll(strings.Join(unit["TimeoutStopSec"], ""), "min", "m"))
	if err != nil || timeout <= busyStopFlushLimit+time.Minute {
		t.Errorf("TimeoutStopSec=%s (%v): bucketfs may spend %s exporting on a busy stop, give it more", unit["TimeoutStopSec"], err, busyStopFlushLimit)
	}
	if m := strings.Join(unit["KillMode"], ""); m == "none" {
		t.Errorf("KillMode=none: systemd would not signal bucketfs")
	}
	if s := strings.Join(unit["KillSignal"], ""); s != "" && s != "SIGTERM" {
		t.Errorf("KillSignal=%s: bucketfs stops on SIGTERM", s)
	}

	p := newFS(t)
	p.start("--export-delay", "1h")
	holder := exec.Command("sleep", "60")
	holder.Dir = p.mnt
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	writeSynced(t, filepath.Join(p.mnt, "before-stop.txt"), []byte("pending when the service stopped"))
	for _, stop := range unit["ExecStop"] {
		ignore, fields := execCommand(stop)
		for i, f := range fields {
			switch {
			case i == 0:
				fields[i] = binary
			case f == mnt:
				fields[i] = p.mnt
			}
		}
		out, err := exec.Command(fields[0], fields[1:]...).CombinedOutput()
		if err != nil {
			if !ignore {
				t.Errorf("ExecStop=%s failed on a busy mount, which fails the stop: %v\n%s", stop, err, out)
			}
			assertOneLineBusyMessage(t, string(out))
		}
	}
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	waitForStop(t, p, "the unit's stop path on a busy mount (else systemd would SIGKILL it after TimeoutStopSec)")
	p.start("--export-delay", "1h")
	if b, ok := p.object("before-stop.txt"); !ok || string(b) != "pending when the service stopped" {
		t.Errorf("after the unit's stop the bucket has %q (%v)", b, ok)
	}
	p.stop()
}
