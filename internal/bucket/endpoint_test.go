package bucket

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"bucketfs/internal/s3test"
	"bucketfs/internal/testlog"
)

// Set-up errors name the endpoint the requests went to, also when it came
// from the environment (AWS_ENDPOINT_URL, as s3.env sets it, or
// AWS_ENDPOINT_URL_S3) rather than from Config.Endpoint (issue 22).
func TestSetUpErrorsNameTheEndpointTheEnvironmentGave(t *testing.T) {
	st := s3test.Store(t)
	for _, env := range []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"} {
		for _, tc := range []struct {
			name string
			cfg  Config
			want string
		}{
			{"no such bucket", Config{Bucket: "no-such-bucket", AccessKey: st.AccessKey, SecretKey: st.SecretKey},
				`bucket "no-such-bucket" does not exist at ` + st.Endpoint},
			{"unknown key", Config{Bucket: "bucketfs", AccessKey: "UNKNOWNKEY", SecretKey: st.SecretKey},
				"the store at " + st.Endpoint + " does not know access key UNKNOWNKEY"},
			{"wrong secret", Config{Bucket: "bucketfs", AccessKey: st.AccessKey, SecretKey: "not-the-secret"},
				"the secret key does not belong to access key " + st.AccessKey + " at " + st.Endpoint},
		} {
			t.Run(env+"/"+tc.name, func(t *testing.T) {
				t.Setenv("AWS_ENDPOINT_URL", "")
				t.Setenv("AWS_ENDPOINT_URL_S3", "")
				t.Setenv(env, st.Endpoint)
				tc.cfg.Region, tc.cfg.OpTimeout = st.Region, 5*time.Second
				c, err := New(context.Background(), tc.cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				err = c.CheckVersioning(context.Background())
				if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "AWS S3") {
					t.Errorf("%v\nwant an error containing %q", err, tc.want)
				}
			})
		}
	}
}

// An endpoint without a scheme is refused with one line saying to write
// http:// or https:// (the user may mean either, so bucketfs does not
// guess), wherever it came from; so is a scheme other than those two.
func TestAnEndpointWithoutASchemeIsRefusedWithOneLine(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	for _, tc := range []struct {
		endpoint, env string
		want          string
	}{
		{"127.0.0.1:9000", "", `--endpoint "127.0.0.1:9000" has no scheme: write http://127.0.0.1:9000 or https://127.0.0.1:9000`},
		{"localhost:9000", "", `--endpoint "localhost:9000" has no scheme: write http://localhost:9000 or https://localhost:9000`},
		{"minio.example", "", `--endpoint "minio.example" has no scheme: write http://minio.example or https://minio.example`},
		{"ftp://minio.example", "", `--endpoint "ftp://minio.example": the scheme must be http:// or https://`},
		{"http://", "", `--endpoint "http://" has no host`},
		{"", "AWS_ENDPOINT_URL", `AWS_ENDPOINT_URL "127.0.0.1:9000" has no scheme: write http://127.0.0.1:9000 or https://127.0.0.1:9000`},
		{"", "AWS_ENDPOINT_URL_S3", `AWS_ENDPOINT_URL_S3 "127.0.0.1:9000" has no scheme`},
	} {
		if tc.env != "" {
			t.Setenv(tc.env, "127.0.0.1:9000")
		}
		c, err := New(context.Background(), Config{Bucket: "b", Endpoint: tc.endpoint, Region: "us-east-1",
			AccessKey: "k", SecretKey: "s"})
		if tc.env != "" {
			t.Setenv(tc.env, "")
		}
		if err == nil {
			c.Close()
			t.Errorf("endpoint %q (env %q): accepted", tc.endpoint, tc.env)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("endpoint %q (env %q): %q\nwant one line containing %q", tc.endpoint, tc.env, err, tc.want)
		}
	}
}

// A store that does not answer at the first contact is announced while the
// client still retries, naming the endpoint, not only when the operation
// bound runs out: both for a port nobody listens on (each attempt fails at
// once) and for one that accepts and never answers (the first attempt
// never ends).
func TestAnUnreachableStoreIsAnnouncedWhileRetrying(t *testing.T) {
	refusing := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	silent := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var conns []net.Conn
		var mu sync.Mutex
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
		t.Cleanup(func() {
			ln.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		})
		return ln.Addr().String()
	}
	for name, addrOf := range map[string]func(*testing.T) string{"refusing": refusing, "silent": silent} {
		t.Run(name, func(t *testing.T) {
			endpoint := "http://" + addrOf(t)
			var log testlog.Log
			c, err := New(context.Background(), Config{Bucket: "b", Endpoint: endpoint, Region: "us-east-1",
				AccessKey: "k", SecretKey: "s", OpTimeout: 10 * time.Minute,
				Logger: slog.New(slog.NewTextHandler(&log, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.CheckVersioning(ctx) }()
			deadline := time.After(2 * time.Minute)
			for !strings.Contains(log.String(), endpoint) {
				select {
				case err := <-done:
					t.Fatalf("CheckVersioning returned %v before saying it retries; log:\n%s", err, log.String())
				case <-deadline:
					t.Fatalf("no word of retrying while the operation runs; log:\n%s", log.String())
				case <-time.After(20 * time.Millisecond):
				}
			}
			got := log.String()
			if !strings.Contains(got, "retrying for up to 10m0s") && !strings.Contains(got, "still waiting, for up to 10m0s") ||
				strings.Count(got, "\n") != 1 {
				t.Errorf("the notice: %q, want one line saying it retries or waits, and for how long", got)
			}
			t.Logf("the notice: %s", got)
			cancel()
			if err := <-done; err == nil || errors.Is(err, ErrNotVersioned) {
				t.Errorf("CheckVersioning against %s: %v", endpoint, err)
			}
		})
	}
}
