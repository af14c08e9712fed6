package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// statusLog turns the lines bucketfs prints for a terminal ("bucketfs:
// ...", "bucketfs: warning: ...") into log records, for a process whose
// standard output and error are its log file (the child that `mount
// --background` starts): every line of that file is then one record with
// its time, in the format of the rest of the log.
type statusLog struct {
	out  io.Writer // the log file itself, where records go
	h    slog.Handler
	mu   sync.Mutex
	part []byte // the start of a line not yet ended
}

func newStatusLog(out io.Writer) *statusLog {
	return &statusLog{out: out, h: slog.NewTextHandler(out, nil)}
}

func (s *statusLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.part = append(s.part, p...)
	for {
		i := bytes.IndexByte(s.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		msg := strings.TrimPrefix(string(s.part[:i]), "bucketfs: ")
		s.part = s.part[i+1:]
		level := slog.LevelInfo
		if m, ok := strings.CutPrefix(msg, "warning: "); ok {
			level, msg = slog.LevelWarn, m
		}
		s.record(level, msg)
	}
}

// record logs msg whatever --log-level says: status lines are what a
// terminal would have shown.
func (s *statusLog) record(level slog.Level, msg string) {
	s.h.Handle(context.Background(), slog.NewRecord(time.Now(), level, msg, 0))
}

// logOutput is where log records written for w go: under a statusLog, its
// file.
func logOutput(w io.Writer) io.Writer {
	if s, ok := w.(*statusLog); ok {
		return s.out
	}
	return w
}
