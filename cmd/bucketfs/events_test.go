package main

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestStatusAndTheStartLineShowTheEventsTokenTheWebhookAsksFor(t *testing.T) {
	p := newFS(t)
	addr := freeAddr(t)
	p.start("--metrics-listen", addr)
	var st struct {
		Token string `json:"events_token"`
	}
	if err := json.Unmarshal([]byte(p.run("status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if b, err := hex.DecodeString(st.Token); err != nil || len(b) != 32 {
		t.Fatalf("status --json shows the events token %q: want 32 bytes in hex", st.Token)
	}
	if out := p.run("status"); !strings.Contains(out, "events token      "+st.Token) {
		t.Fatalf("status does not show the token %s:\n%s", st.Token, out)
	}
	post := func(auth string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+addr+"/events", strings.NewReader(`{"Records":[]}`))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(""); code != http.StatusUnauthorized {
		t.Errorf("/events without the token: %d, want 401", code)
	}
	if code := post("Bearer " + st.Token); code != http.StatusNoContent {
		t.Errorf("/events with the token from status: %d, want 204", code)
	}
	resp, err := http.Get("http://" + addr + "/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /status on --metrics-listen: %s, want 404", resp.Status)
	}
	p.stop()
	if !strings.Contains(p.log.String(), "/events (token "+st.Token+")") {
		t.Errorf("the start line does not show the token:\n%s", p.log)
	}
	if out := p.run("status"); !strings.Contains(out, "stopped") || !strings.Contains(out, "events token      "+st.Token) {
		t.Errorf("status of the stopped file system does not show the same token:\n%s", out)
	}
}
