package bucket

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"bucketfs/internal/s3test"
)

// The first contact with the store says in one line what is wrong and what
// to do (issue 13), never the SDK's request ids or instance-metadata text.
func TestSetUpErrorsSayWhatIsWrongAndWhatToDo(t *testing.T) {
	st := s3test.Store(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("HOME", t.TempDir())
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no such bucket", Config{Bucket: "no-such-bucket", AccessKey: st.AccessKey, SecretKey: st.SecretKey},
			`bucket "no-such-bucket" does not exist at ` + st.Endpoint},
		{"unknown key", Config{Bucket: "bucketfs", AccessKey: "UNKNOWNKEY", SecretKey: st.SecretKey},
			"does not know access key UNKNOWNKEY: check AWS_ACCESS_KEY_ID"},
		{"wrong secret", Config{Bucket: "bucketfs", AccessKey: st.AccessKey, SecretKey: "not-the-secret"},
			"the secret key does not belong to access key " + st.AccessKey},
		{"no credentials", Config{Bucket: "bucketfs"},
			"no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"},
	} {
		tc.cfg.Endpoint, tc.cfg.Region, tc.cfg.OpTimeout = st.Endpoint, st.Region, 5*time.Second
		c, err := New(context.Background(), tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = c.CheckVersioning(context.Background())
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.want) || strings.ContainsAny(msg, "\n") ||
			strings.Contains(msg, "RequestID") || strings.Contains(msg, "IMDS") || strings.Contains(msg, "not found:") {
			t.Errorf("%s: %q\nwant one line containing %q", tc.name, msg, tc.want)
		}
		c.Close()
	}
}

// Access denied: the embedded store has only its root account, which may do
// everything, so a server that answers as S3 does for a key without the
// bucket's permissions stands in for it here.
func TestAccessDeniedSaysWhichPermissionsAreNeeded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message><RequestId>R</RequestId><HostId>H</HostId></Error>`)
	}))
	defer srv.Close()
	for _, ro := range []bool{false, true} {
		c, err := New(context.Background(), Config{Bucket: "locked", Endpoint: srv.URL, Region: "us-east-1",
			AccessKey: "AKIDLIMITED", SecretKey: "s", OpTimeout: 5 * time.Second, ReadOnly: ro})
		if err != nil {
			t.Fatal(err)
		}
		err = c.CheckVersioning(context.Background())
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		want := `access key AKIDLIMITED may not use bucket "locked" at ` + srv.URL + ` (AccessDenied): it needs s3:ListBucket, s3:GetBucketVersioning, s3:GetObject`
		if !strings.Contains(msg, want) || strings.Contains(msg, "RequestID") || strings.Contains(msg, "s3:PutObject") == ro {
			t.Errorf("read-only %v: %q\nwant one line containing %q, with s3:PutObject only when not read-only", ro, msg, want)
		}
		c.Close()
	}
}
