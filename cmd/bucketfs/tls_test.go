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
