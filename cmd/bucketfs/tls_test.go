package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"bucketfs/internal/nfsclient"
	"bucketfs/internal/testcert"
)

// writeCert writes a self-signed certificate for 127.0.0.1 and its key as
// PEM files and returns their paths and the pool that trusts it.
func writeCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	c := testcert.New(t)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(certFile, c.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, c.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, c.Pool
}

// `serve --tls-cert --tls-key --tls-required` (issue 12): NFS clients get
// RPC-with-TLS and plain ones are refused; the metrics listener serves
// HTTPS only.
func TestServeWithACertificateSpeaksTLSOnNFSAndHTTP(t *testing.T) {
	certFile, keyFile, pool := writeCert(t)
	p := newFS(t)
	metrics := freeAddr(t)
	port := startServe(t, p, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-required", "--metrics-listen", metrics)
	addr := "127.0.0.1:" + port
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	c, err := nfsclient.Dial(ctx, addr, nfsclient.Config{MinorVersion: 1,
		TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}})
	if err != nil {
		t.Fatalf("an RPC-with-TLS client: %v\n%s", err, p.log)
	}
	if _, err := c.RootFH(ctx); err != nil {
		t.Errorf("PUTROOTFH over TLS: %v", err)
	}
	c.Shutdown(ctx)
	var rpcErr *nfsclient.RPCError
	if _, err := nfsclient.Dial(ctx, addr, nfsclient.Config{MinorVersion: 1}); !errors.As(err, &rpcErr) {
		t.Errorf("a plain client against --tls-required: %v, want an RPC error", err)
	}

	https := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	resp, err := https.Get("https://" + metrics + "/metrics")
	if err != nil {
		t.Fatalf("GET https://%s/metrics: %v", metrics, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "bucketfs_") {
		t.Errorf("HTTPS /metrics: %s", resp.Status)
	}
	if resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + metrics + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP /metrics answered %s on an HTTPS listener", resp.Status)
		}
	}
}

// Certificate flags that do not go together fail at start with a one-line
// reason.
func TestServeRefusesIncompleteTLSFlags(t *testing.T) {
	certFile, _, _ := writeCert(t)
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--tls-required"}, "--tls-required needs a certificate"},
		{[]string{"--tls-cert", certFile}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", certFile, "--tls-key", certFile}, "--tls-cert/--tls-key"},
	} {
		args := append([]string{"serve", "--state-dir", t.TempDir(), "--nfs-listen", "127.0.0.1:0"}, tc.flags...)
		out, err := exec.Command(binary, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("serve %v: %v\n%s\nwant an error saying %q", tc.flags, err, out, tc.want)
		}
	}
}

// serve says whether NFS clients get TLS and whether it is required, its
// suggested mount command asks for TLS when the server offers it, and a
// client refused for not starting TLS leaves a log line naming it (issue
// 22).
func TestServeAnnouncesTLSAndLogsTheClientsItRefuses(t *testing.T) {
	certFile, keyFile, _ := writeCert(t)
	for _, tc := range []struct {
		flags     []string
		tlsLine   string
		mountOpts string
	}{
		{nil, "", "-o vers=4.1,port="},
		{[]string{"--tls-cert", certFile, "--tls-key", keyFile}, "RPC-with-TLS offered", "-o vers=4.1,xprtsec=tls,port="},
		{[]string{"--tls-cert", certFile, "--tls-key", keyFile, "--tls-required"}, "RPC-with-TLS required", "-o vers=4.1,xprtsec=tls,port="},
	} {
		p := newFS(t)
		port := startServe(t, p, tc.flags...)
		waitFor(t, "the mount line", func() bool { return strings.Contains(p.log.String(), "mount with:") })
		out := p.log.String()
		if tc.tlsLine == "" && strings.Contains(out, "RPC-with-TLS") || tc.tlsLine != "" && !strings.Contains(out, "bucketfs: NFS: "+tc.tlsLine) {
			t.Errorf("serve %v said:\n%s\nwant a line saying %q", tc.flags, out, tc.tlsLine)
		}
		if !strings.Contains(out, "mount with: mount -t nfs4 "+tc.mountOpts+port+" ") {
			t.Errorf("serve %v said:\n%s\nwant a mount command with %s%s", tc.flags, out, tc.mountOpts, port)
		}
		if slices.Contains(tc.flags, "--tls-required") {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, err := nfsclient.Dial(ctx, "127.0.0.1:"+port, nfsclient.Config{MinorVersion: 1})
			cancel()
			if err == nil {
				t.Fatal("a plain client got through --tls-required")
			}
			waitFor(t, "a log line of the refused client", func() bool {
				return strings.Contains(p.log.String(), "did not start RPC-with-TLS") && strings.Contains(p.log.String(), "client=127.0.0.1")
			})
		}
	}
}
