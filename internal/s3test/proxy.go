package s3test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"bucketfs/internal/s3local"
)

// Proxy is a fault-injecting S3 proxy in front of a store. It forwards
// every request as it came, except those its intercept function takes
// over: that function may send requests of its own to the store first,
// forward the request with some of its headers taken away (Strip signs it
// again with the store's credentials, as if the client had sent it so),
// and do more before the response goes back. It makes an interleaving that
// a real store shows only under a race (MinIO acknowledging a PUT with
// If-None-Match: * that raced another PUT of the key) happen every time.
type Proxy struct {
	URL       string
	srv       *s3local.Server
	rp        *httputil.ReverseProxy
	intercept func(p *Proxy, w http.ResponseWriter, r *http.Request) bool
}

// NewProxy starts a proxy in front of srv; t.Cleanup stops it. intercept
// (nil: none) sees every request first, concurrently for concurrent
// requests, and returns true if it has answered the request (by Forward
// or otherwise).
func NewProxy(t testing.TB, srv *s3local.Server, intercept func(p *Proxy, w http.ResponseWriter, r *http.Request) bool) *Proxy {
	t.Helper()
	u, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{srv: srv, intercept: intercept,
		rp: httputil.NewSingleHostReverseProxy(u)} // keeps the Host header, so signatures hold
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.intercept != nil && p.intercept(p, w, r) {
			return
		}
		p.rp.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	p.URL = hs.URL
	return p
}

// Forward sends r to the store and the store's response to w.
func (p *Proxy) Forward(w http.ResponseWriter, r *http.Request) { p.rp.ServeHTTP(w, r) }

// ForwardThen is Forward that calls then once the store has answered r,
// before the answer goes on to w: what then does (another client's write,
// a wait) comes between the store's answer and the client's reading it.
func (p *Proxy) ForwardThen(w http.ResponseWriter, r *http.Request, then func()) {
	rec := httptest.NewRecorder()
	p.rp.ServeHTTP(rec, r)
	then()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// Strip removes the named headers from r and signs it again (AWS
// signature version 4, with the date, payload hash and other signed
// headers it came with), so that the store takes it as the client's.
func (p *Proxy) Strip(r *http.Request, headers ...string) error {
	_, list, ok := strings.Cut(r.Header.Get("Authorization"), "SignedHeaders=")
	if !ok {
		return fmt.Errorf("s3test: strip %v: the request is not signed with SigV4", headers)
	}
	list, _, _ = strings.Cut(list, ",")
	for _, h := range headers {
		r.Header.Del(h)
	}
	date, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return fmt.Errorf("s3test: strip %v: request date: %w", headers, err)
	}
	// Sign a copy that holds only the headers the client signed (less
	// those removed): the proxy and Go's transport add others.
	req := r.Clone(context.Background())
	req.Header = http.Header{}
	for _, h := range strings.Split(list, ";") {
		if vs := r.Header.Values(h); len(vs) > 0 && h != "host" && h != "content-length" {
			req.Header[http.CanonicalHeaderKey(h)] = vs
		}
	}
	req.URL.Scheme, req.URL.Host = "http", r.Host
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	creds := aws.Credentials{AccessKeyID: p.srv.AccessKey, SecretAccessKey: p.srv.SecretKey}
	if err := signer.SignHTTP(context.Background(), creds, req, r.Header.Get("X-Amz-Content-Sha256"), "s3", p.srv.Region, date); err != nil {
		return fmt.Errorf("s3test: strip %v: sign again: %w", headers, err)
	}
	r.Header.Set("Authorization", req.Header.Get("Authorization"))
	return nil
}

// ObjectKey is the key r addresses (path-style: /bucket/key), "" for a
// request to the bucket itself.
func ObjectKey(r *http.Request) string {
	_, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	return key
}
