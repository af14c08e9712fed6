// Package sns checks what Amazon SNS delivers to an HTTP(S) endpoint: the
// JSON envelope of a notification or of a subscription (un)confirmation,
// signed by SNS with a certificate it publishes on its own regional host.
//
// AWS S3 sends event notifications to HTTP endpoints only through an SNS
// topic. A Verifier checks an envelope's signature over the string AWS
// documents for its type, with the certificate named by SigningCertURL,
// which must be an https URL on sns.REGION.amazonaws.com (or
// amazonaws.com.cn); each certificate is fetched once and kept. Confirm
// visits a confirmation's SubscribeURL, under the same host rule.
//
// The package never trusts a URL out of a message before the host rule
// holds, and never follows a redirect off such a host. It does not check
// which topic a message comes from: the endpoint's own authentication
// (internal/sync's webhook token) says who may send at all.
package sns

import (
	"context"
	"crypto"
	"crypto/rsa"
	_ "crypto/sha1" // SignatureVersion 1
	_ "crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	gosync "sync"
	"time"
)

// The message types SNS delivers.
const (
	TypeSubscriptionConfirmation = "SubscriptionConfirmation"
	TypeNotification             = "Notification"
	TypeUnsubscribeConfirmation  = "UnsubscribeConfirmation"
)

// Message is the JSON body of an SNS HTTP(S) delivery.
type Message struct {
	Type             string `json:"Type"`
	MessageID        string `json:"MessageId"`
	TopicArn         string `json:"TopicArn"`
	Subject          string `json:"Subject,omitempty"`
	Message          string `json:"Message"` // for a Notification, what was published (an S3 event: JSON)
	Timestamp        string `json:"Timestamp"`
	SignatureVersion string `json:"SignatureVersion"` // "1": SHA1withRSA, "2": SHA256withRSA
	Signature        string `json:"Signature"`        // base64
	SigningCertURL   string `json:"SigningCertURL"`
	SubscribeURL     string `json:"SubscribeURL,omitempty"`
	UnsubscribeURL   string `json:"UnsubscribeURL,omitempty"`
	Token            string `json:"Token,omitempty"`
}

// Parse reads body as an SNS envelope. ok is false when body is JSON
// without a Type (not an envelope: an S3 event sent directly, say).
func Parse(body []byte) (m Message, ok bool, err error) {
	if err := json.Unmarshal(body, &m); err != nil {
		return m, false, err
	}
	return m, m.Type != "", nil
}

// StringToSign is what SNS signs for m: the values of a fixed, per-type
// list of fields in that order, each as "Name\nvalue\n". A Notification
// signs Message, MessageId, Subject (only when present), Timestamp,
// TopicArn and Type; the two confirmations sign Message, MessageId,
// SubscribeURL, Timestamp, Token, TopicArn and Type.
func StringToSign(m *Message) (string, error) {
	type field struct{ name, value string }
	var fields []field
	switch m.Type {
	case TypeNotification:
		fields = []field{{"Message", m.Message}, {"MessageId", m.MessageID}}
		if m.Subject != "" {
			fields = append(fields, field{"Subject", m.Subject})
		}
		fields = append(fields, field{"Timestamp", m.Timestamp}, field{"TopicArn", m.TopicArn}, field{"Type", m.Type})
	case TypeSubscriptionConfirmation, TypeUnsubscribeConfirmation:
		fields = []field{{"Message", m.Message}, {"MessageId", m.MessageID}, {"SubscribeURL", m.SubscribeURL},
			{"Timestamp", m.Timestamp}, {"Token", m.Token}, {"TopicArn", m.TopicArn}, {"Type", m.Type}}
	default:
		return "", fmt.Errorf("sns: unknown message type %q", m.Type)
	}
	var b strings.Builder
	for _, f := range fields {
		b.WriteString(f.name)
		b.WriteByte('\n')
		b.WriteString(f.value)
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// snsHost is the host rule for certificate and subscription URLs.
var snsHost = regexp.MustCompile(`^sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?$`)

// TrustedURL parses raw and checks that it is an https URL on an SNS
// regional host (default port, no credentials).
func TrustedURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("sns: %w", err)
	}
	if u.Scheme != "https" || u.User != nil || (u.Port() != "" && u.Port() != "443") || !snsHost.MatchString(u.Hostname()) {
		return nil, fmt.Errorf("sns: %q is not an https URL on sns.REGION.amazonaws.com", raw)
	}
	return u, nil
}

// maxCachedCerts bounds the certificates a Verifier keeps. SNS signs with
// one certificate per region at a time, so a handful is plenty; past it
// the cache starts again.
const maxCachedCerts = 16

// fetchTimeout bounds one fetch of a signing certificate.
const fetchTimeout = 10 * time.Second

// maxFetch bounds the bodies of certificate and confirmation responses.
const maxFetch = 64 << 10

// Verifier checks SNS signatures and confirms subscriptions. It keeps
// every signing certificate it fetched. Safe for concurrent use.
type Verifier struct {
	client *http.Client

	mu    gosync.Mutex
	certs map[string]*certEntry // by SigningCertURL
}

type certEntry struct {
	ready chan struct{} // closed when key or err is set
	key   *rsa.PublicKey
	err   error
}

// NewVerifier returns a Verifier that fetches certificates and visits
// subscription URLs with client (nil: a client with a 10 s timeout).
// Whatever client is given, redirects are followed only to URLs that pass
// TrustedURL.
func NewVerifier(client *http.Client) *Verifier {
	c := http.Client{Timeout: fetchTimeout}
	if client != nil {
		c = *client
	}
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("sns: too many redirects")
		}
		_, err := TrustedURL(req.URL.String())
		return err
	}
	return &Verifier{client: &c, certs: map[string]*certEntry{}}
}

// Verify checks m's signature.
func (v *Verifier) Verify(ctx context.Context, m *Message) error {
	var hash crypto.Hash
	switch m.SignatureVersion {
	case "1":
		hash = crypto.SHA1
	case "2":
		hash = crypto.SHA256
	default:
		return fmt.Errorf("sns: unknown signature version %q", m.SignatureVersion)
	}
	sig, err := base64.StdEncoding.DecodeString(m.Signature)
	if err != nil {
		return fmt.Errorf("sns: signature: %w", err)
	}
	s, err := StringToSign(m)
	if err != nil {
		return err
	}
	key, err := v.signingKey(ctx, m.SigningCertURL)
	if err != nil {
		return err
	}
	h := hash.New()
	h.Write([]byte(s))
	if err := rsa.VerifyPKCS1v15(key, hash, h.Sum(nil), sig); err != nil {
		return fmt.Errorf("sns: message %s: the signature does not match: %w", m.MessageID, err)
	}
	return nil
}

// signingKey returns the public key of the certificate at rawURL, fetching
// it the first time. Concurrent callers for one URL share one fetch; a
// failed fetch is not kept.
func (v *Verifier) signingKey(ctx context.Context, rawURL string) (*rsa.PublicKey, error) {
	u, err := TrustedURL(rawURL)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	e, ok := v.certs[rawURL]
	if !ok {
		if len(v.certs) >= maxCachedCerts {
			clear(v.certs)
		}
		e = &certEntry{ready: make(chan struct{})}
		v.certs[rawURL] = e
	}
	v.mu.Unlock()
	if !ok {
		// The fetch outlives this caller: others may wait for it.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
		e.key, e.err = v.fetchKey(fctx, u)
		cancel()
		if e.err != nil {
			v.mu.Lock()
			if v.certs[rawURL] == e {
				delete(v.certs, rawURL)
			}
			v.mu.Unlock()
		}
		close(e.ready)
	}
	select {
	case <-e.ready:
		return e.key, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (v *Verifier) fetchKey(ctx context.Context, u *url.URL) (*rsa.PublicKey, error) {
	body, err := v.get(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("sns: signing certificate: %w", err)
	}
	block, _ := pem.Decode(body)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("sns: signing certificate %s: no PEM certificate", u)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("sns: signing certificate %s: %w", u, err)
	}
	if now := time.Now(); now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
		return nil, fmt.Errorf("sns: signing certificate %s is valid from %v to %v only", u, cert.NotBefore, cert.NotAfter)
	}
	key, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("sns: signing certificate %s: not an RSA key", u)
	}
	return key, nil
}

// Confirm visits the SubscribeURL of a (verified) SubscriptionConfirmation,
// which confirms the subscription.
func (v *Verifier) Confirm(ctx context.Context, m *Message) error {
	if m.Type != TypeSubscriptionConfirmation {
		return fmt.Errorf("sns: confirm a %s message", m.Type)
	}
	u, err := TrustedURL(m.SubscribeURL)
	if err != nil {
		return err
	}
	if _, err := v.get(ctx, u); err != nil {
		return fmt.Errorf("sns: confirm the subscription to %s: %w", m.TopicArn, err)
	}
	return nil
}

// get fetches u, which must answer 200, reading at most maxFetch bytes.
func (v *Verifier) get(ctx context.Context, u *url.URL) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxFetch))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return body, nil
}
