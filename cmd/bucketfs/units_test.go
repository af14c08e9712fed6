package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
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
			fields := strings.Fields(cmdline)
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
