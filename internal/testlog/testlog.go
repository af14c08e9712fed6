// Package testlog captures what code under test logs: a slog JSON handler
// at debug writes to a Log, and Records decodes the lines. For tests only.
package testlog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Log collects log lines. The zero value is ready; it is safe for
// concurrent use.
type Log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// Logger is a debug-level logger that writes to l.
func (l *Log) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// String is everything logged so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Records returns the records logged so far whose message starts with msg
// and whose attributes include every pair of match.
func (l *Log) Records(t testing.TB, msg string, match map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m, _ := r["msg"].(string); !strings.HasPrefix(m, msg) {
			continue
		}
		ok := true
		for k, v := range match {
			ok = ok && r[k] == v
		}
		if ok {
			out = append(out, r)
		}
	}
	return out
}

// One returns the single record Records finds, failing the test otherwise.
func (l *Log) One(t testing.TB, what, msg string, match map[string]any) map[string]any {
	t.Helper()
	rs := l.Records(t, msg, match)
	if len(rs) != 1 {
		t.Fatalf("%s: %d lines %q with %v, want 1; the log:\n%s", what, len(rs), msg, match, l.String())
	}
	return rs[0]
}
