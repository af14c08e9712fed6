package main

import (
	"bytes"
	"strings"
	"testing"

	"bucketfs/internal/engine"
)

// Status names every live server, with its addresses, and marks the one
// holding the sync lease and the one answering.
func TestStatusListsTheLiveServersAndTheLeader(t *testing.T) {
	st := engine.Status{Bucket: "s3://b/", Running: true, ServerID: "bbbb",
		Lease: &engine.LeaseStatus{Holder: "aaaa", Token: 7, LeaseTimeS: 10},
		Servers: []engine.ServerStatus{
			{ID: "aaaa", Host: "host-a", PID: 11, Addrs: map[string]string{"nfs": "10.0.0.1:2049"}, Leader: true},
			{ID: "bbbb", Host: "host-b", PID: 22, Addrs: map[string]string{"nfs": "10.0.0.2:2049", "metrics": "10.0.0.2:9100"}, This: true},
		}}
	var out bytes.Buffer
	printStatus(&out, &st)
	s := out.String()
	for _, want := range []string{
		"2 live servers, sharing the export queue; sync lease held by aaaa (token 7)",
		"aaaa  host-a pid 11  nfs 10.0.0.1:2049",
		"bbbb  host-b pid 22  metrics 10.0.0.2:9100, nfs 10.0.0.2:2049",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("status lacks %q:\n%s", want, s)
		}
	}
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, "aaaa  host-a") && !strings.HasSuffix(line, "leader") {
			t.Errorf("the leader's line does not say so: %q", line)
		}
		if strings.Contains(line, "bbbb  host-b") && !strings.HasSuffix(line, "this one") {
			t.Errorf("the answering server's line does not say so: %q", line)
		}
	}
}
