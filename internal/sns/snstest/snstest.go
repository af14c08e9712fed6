// Package snstest is a fake of the Amazon SNS side of an HTTP(S)
// subscription, for tests: AWS cannot be reached from where the tests run,
// so a Fake plays SNS. It makes its own RSA key and self-signed signing
// certificate, signs envelopes with them, and answers, through the
// http.Client it hands out, what a Verifier asks SNS for: the certificate
// at CertURL and visits of subscription URLs, which it records.
package snstest

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	gosync "sync"
	"testing"
	"time"

	"bucketfs/internal/sns"
)

// Region is the region of the fake's URLs.
const Region = "eu-west-3"

// Fake is a fake SNS with one signing certificate.
type Fake struct {
	// Client reaches the fake instead of the internet: give it to
	// sns.NewVerifier.
	Client *http.Client
	// CertURL is where the fake serves its certificate, on the SNS host
	// of Region.
	CertURL string

	key *rsa.PrivateKey

	mu          gosync.Mutex
	cert        []byte
	certFetches int
	visited     []string
	requested   []string
}

// New makes a fake SNS with a fresh 2048-bit key and a certificate valid
// for a day.
func New(t testing.TB) *Fake {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sns." + Region + ".amazonaws.com (fake, for tests)"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	f := &Fake{key: key, CertURL: "https://sns." + Region + ".amazonaws.com/SimpleNotificationService-fake.pem",
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	f.Client = &http.Client{Transport: roundTripper(f.serve)}
	return f
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// serve answers a request the verifier sent to "SNS": the certificate at
// CertURL, 200 for a subscription URL on the SNS host, 404 otherwise.
func (f *Fake) serve(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := r.URL.String()
	f.requested = append(f.requested, u)
	status, body := http.StatusNotFound, []byte("no such thing")
	switch {
	case u == f.CertURL:
		f.certFetches++
		status, body = http.StatusOK, f.cert
	case r.URL.Host == "sns."+Region+".amazonaws.com" && r.URL.Query().Get("Action") == "ConfirmSubscription":
		f.visited = append(f.visited, u)
		status, body = http.StatusOK, []byte("<ConfirmSubscriptionResponse/>")
	}
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: r}, nil
}

// Sign fills in m's SigningCertURL (when empty) and signs it with
// SignatureVersion version ("1" or "2").
func (f *Fake) Sign(t testing.TB, m *sns.Message, version string) {
	t.Helper()
	if m.SigningCertURL == "" {
		m.SigningCertURL = f.CertURL
	}
	m.SignatureVersion = version
	s, err := sns.StringToSign(m)
	if err != nil {
		t.Fatal(err)
	}
	hash := crypto.SHA256
	if version == "1" {
		hash = crypto.SHA1
	}
	h := hash.New()
	h.Write([]byte(s))
	sig, err := rsa.SignPKCS1v15(rand.Reader, f.key, hash, h.Sum(nil))
	if err != nil {
		t.Fatal(err)
	}
	m.Signature = base64.StdEncoding.EncodeToString(sig)
}

// SubscribeURL is the confirmation URL of a subscription to topic.
func SubscribeURL(topic string) string {
	return "https://sns." + Region + ".amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + topic + "&Token=fake-token"
}

// CertFetches is how many times the certificate was fetched.
func (f *Fake) CertFetches() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.certFetches
}

// Visited are the subscription URLs visited, in order.
func (f *Fake) Visited() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.visited...)
}

// Requested are all URLs requested through Client, in order.
func (f *Fake) Requested() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requested...)
}
