package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"bucketfs/internal/fusetest"
	"bucketfs/internal/s3test"
	"bucketfs/internal/testlog"
)

// storeEnv is an environment with the given AWS variables and none of
// the caller's AWS settings (profiles, config files, instance metadata).
func storeEnv(vars ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	return append(append(env, "AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent",
		"AWS_EC2_METADATA_DISABLED=true"), vars...)
}

// With the store's address in AWS_ENDPOINT_URL (as s3.env sets it), a
// credential or bucket error names that address, not AWS (issue 22).
func TestStoreErrorsNameTheEndpointFromTheEnvironment(t *testing.T) {
	st := s3test.Store(t)
	for _, tc := range []struct {
		name, bucket, key string
		want              string
	}{
		{"unknown key", "bucketfs", "UNKNOWNKEY", "the store at " + st.Endpoint + " does not know access key UNKNOWNKEY"},
		{"no such bucket", "no-such-bucket", st.AccessKey, `bucket "no-such-bucket" does not exist at ` + st.Endpoint},
	} {
		cmd := exec.Command(binary, "mount", "--state-dir", t.TempDir(), "--bucket", "s3://"+tc.bucket, t.TempDir())
		cmd.Env = storeEnv("AWS_ENDPOINT_URL="+st.Endpoint, "AWS_REGION="+st.Region,
			"AWS_ACCESS_KEY_ID="+tc.key, "AWS_SECRET_ACCESS_KEY="+st.SecretKey)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "AWS S3") {
			t.Errorf("%s: %v\n%s\nwant an error containing %q", tc.name, err, out, tc.want)
		}
	}
}

// An --endpoint without a scheme is refused with one line asking for
// http:// or https://, not the SDK's text.
func TestAnEndpointWithoutASchemeIsRefusedWithOneLine(t *testing.T) {
	for _, command := range []string{"mount", "serve"} {
		args := []string{command, "--state-dir", t.TempDir(), "--bucket", "s3://b", "--endpoint", "127.0.0.1:9000"}
		if command == "mount" {
			args = append(args, t.TempDir())
		} else {
			args = append(args, "--nfs-listen", "127.0.0.1:0")
		}
		var stderr bytes.Buffer
		cmd := exec.Command(binary, args...)
		cmd.Env = storeEnv("AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "AWS_REGION=us-east-1")
		cmd.Stderr = &stderr
		err := cmd.Run()
		want := `--endpoint "127.0.0.1:9000" has no scheme: write http://127.0.0.1:9000 or https://127.0.0.1:9000`
		if msg := stderr.String(); err == nil || !strings.Contains(msg, want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("%s: %v\n%s\nwant one line containing %q", command, err, msg, want)
		}
	}
}

// A store nobody answers at is announced at once, with its address, while
// bucketfs still retries; not only after the 30 s the first contact may
// take.
func TestAnUnreachableStoreIsAnnouncedWhileBucketfsRetries(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	mnt := t.TempDir()
	var out testlog.Log
	cmd := exec.Command(binary, "mount", "--state-dir", t.TempDir(), "--bucket", "s3://b", "--endpoint", endpoint, mnt)
	cmd.Env = storeEnv("AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "AWS_REGION=us-east-1")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if fusetest.Mounted(mnt) {
			exec.Command("fusermount3", "-u", "-z", mnt).Run()
		}
	})
	waitFor(t, "word of the unreachable store", func() bool {
		select {
		case <-exited:
			t.Fatalf("bucketfs exited before saying it retries:\n%s", out.String())
		default:
		}
		return strings.Contains(out.String(), "retrying")
	})
	if got := out.String(); !strings.Contains(got, "cannot reach the store at "+endpoint+" yet") ||
		!strings.Contains(got, "connection refused") {
		t.Errorf("bucketfs said:\n%s\nwant that it cannot reach the store at %s yet, and why", got, endpoint)
	}
}
