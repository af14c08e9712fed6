package sync

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
	"bucketfs/internal/sns"
	"bucketfs/internal/sns/snstest"
)

const hookToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// hookEnv is a webhook in front of an importer whose root is listed, over
// a bucket of the shared embedded store under the prefix "fs/". Its
// notification workers start with run, so a test can look at the queue
// before anything is taken from it.
type hookEnv struct {
	t   *testing.T
	st  *uploadStore
	m   *meta.Store
	im  *Importer
	url string
	sns *snstest.Fake
}

func newHookEnv(t *testing.T, cfg ImporterConfig) *hookEnv {
	t.Helper()
	st := newUploadStore(t)
	m := newMeta(t)
	im := NewImporter(m, st.bucket, cfg)
	list(t, m, im, "")
	fake := snstest.New(t)
	srv := httptest.NewServer(im.WebhookHandler(WebhookConfig{Bucket: st.name, Prefix: "fs/", Token: hookToken,
		SNS: sns.NewVerifier(fake.Client)}))
	t.Cleanup(srv.Close)
	return &hookEnv{t: t, st: st, m: m, im: im, url: srv.URL, sns: fake}
}

// run starts the notification workers (4) until the test ends.
func (h *hookEnv) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.im.RunNotifications(ctx, 4)
	}()
	h.t.Cleanup(func() {
		cancel()
		<-done
	})
}

// post sends body with the given Authorization header ("" for none) and
// returns the status and the response body.
func (h *hookEnv) post(auth string, body []byte) (int, string) {
	h.t.Helper()
	req, err := http.NewRequest("POST", h.url, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

func bearer(token string) string { return "Bearer " + token }

// s3Event is an S3 event notification with one ObjectCreated:Put record
// per key (full keys, encoded as S3 encodes them).
func s3Event(bucketName string, keys ...string) []byte {
	type rec struct {
		EventName string `json:"eventName"`
		S3        struct {
			Bucket struct {
				Name string `json:"name"`
			} `json:"bucket"`
			Object struct {
				Key  string `json:"key"`
				Size int    `json:"size"`
			} `json:"object"`
		} `json:"s3"`
	}
	var msg struct{ Records []rec }
	for _, k := range keys {
		var r rec
		r.EventName = "ObjectCreated:Put"
		r.S3.Bucket.Name = bucketName
		r.S3.Object.Key = url.QueryEscape(k)
		msg.Records = append(msg.Records, r)
	}
	b, _ := json.Marshal(msg)
	return b
}

// madeUp returns n keys under "fs/" that no object has.
func madeUp(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("fs/made-up-%05d", i)
	}
	return keys
}

func (h *hookEnv) heads() uint64 { return h.st.bucket.Stats().Head }

// waitApplied waits until n keys were revalidated and none is pending.
func (h *hookEnv) waitApplied(n int64) {
	h.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; {
		s := h.im.EventStats()
		if s.Applied >= n && s.Pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%d keys revalidated, %d pending; waited for %d", s.Applied, s.Pending, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTheWebhookRefusesRequestsWithoutTheTokenAndDoesNoWork(t *testing.T) {
	h := newHookEnv(t, ImporterConfig{WebhookRate: rate.Inf})
	body := s3Event(h.st.name, "fs/a")
	basic := func(user, pw string) string {
		req, _ := http.NewRequest("POST", "/", nil)
		req.SetBasicAuth(user, pw)
		return req.Header.Get("Authorization")
	}
	for name, auth := range map[string]string{
		"no credentials":          "",
		"a wrong bearer token":    bearer(strings.Repeat("0", len(hookToken))),
		"a bearer token prefix":   bearer(hookToken[:len(hookToken)-1]),
		"the token and more":      bearer(hookToken + "0"),
		"a wrong password":        basic("bucketfs", "nope"),
		"the token as user name":  basic(hookToken, ""),
		"the token with no label": hookToken,
	} {
		code, msg := h.post(auth, body)
		if code != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", name, code, msg)
		}
	}
	if s := h.im.EventStats(); s.Pending != 0 {
		t.Fatalf("%d keys queued by unauthenticated requests", s.Pending)
	}
	for name, auth := range map[string]string{
		"bearer":                 bearer(hookToken),
		"bearer, any case":       "bearer " + hookToken,
		"basic, as the password": basic("bucketfs", hookToken),
	} {
		if code, msg := h.post(auth, body); code != http.StatusNoContent {
			t.Errorf("%s: %d %s, want 204", name, code, msg)
		}
	}
	if s := h.im.EventStats(); s.Pending != 1 {
		t.Fatalf("%d keys queued, want fs/a once", s.Pending)
	}

	// SNS sends the credentials of its endpoint URL only when challenged
	// for basic authentication.
	resp, err := http.Post(h.url, "text/plain", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Basic ") {
		t.Errorf("401 challenges with %q, want Basic", got)
	}
}

func TestARequestOfMoreRecordsThanTheLimitIsRefusedWhole(t *testing.T) {
	h := newHookEnv(t, ImporterConfig{WebhookRate: rate.Inf})
	h.run()
	before := h.heads()
	code, msg := h.post(bearer(hookToken), s3Event(h.st.name, madeUp(2000)...))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "at most 1000") {
		t.Fatalf("2000 records: %d %q, want 413 saying the limit", code, msg)
	}
	if s := h.im.EventStats(); s.Pending != 0 || s.Applied != 0 {
		t.Fatalf("after the refusal: %+v, want nothing queued", s)
	}
	if n := h.heads() - before; n != 0 {
		t.Fatalf("a refused request cost %d HEADs", n)
	}
}

func TestAThousandMadeUpRecordsCostAtMostAThousandHEADs(t *testing.T) {
	h := newHookEnv(t, ImporterConfig{WebhookRate: rate.Inf})
	h.run()
	before := h.heads()
	if code, msg := h.post(bearer(hookToken), s3Event(h.st.name, madeUp(MaxWebhookRecords)...)); code != http.StatusNoContent {
		t.Fatalf("%d records: %d %s", MaxWebhookRecords, code, msg)
	}
	h.waitApplied(MaxWebhookRecords)
	if n := h.heads() - before; n > MaxWebhookRecords {
		t.Fatalf("%d made-up records cost %d HEADs, want at most one each", MaxWebhookRecords, n)
	}
}

func TestAMissingObjectIsOneHEADNotRetried(t *testing.T) {
	h := newHookEnv(t, ImporterConfig{WebhookRate: rate.Inf})
	h.run()
	before, retries := h.heads(), h.st.bucket.Stats().Retries
	if code, msg := h.post(bearer(hookToken), s3Event(h.st.name, "fs/ghost")); code != http.StatusNoContent {
		t.Fatalf("%d %s", code, msg)
	}
	h.waitApplied(1)
	if n, r := h.heads()-before, h.st.bucket.Stats().Retries-retries; n != 1 || r != 0 {
		t.Fatalf("an ObjectCreated record of a missing object cost %d HEADs, %d retries; want one, none", n, r)
	}
}

func TestTheSameKeyTwiceInARequestOrWhilePendingIsOneHEAD(t *testing.T) {
	h := newHookEnv(t, ImporterConfig{WebhookRate: rate.Inf})
	// "fs/a b" twice, encoded both ways S3 stores encode a space, and
	// once more in a second request while the first is pending.
	body := []byte(strings.Replace(string(s3Event(h.st.name, "fs/a b", "fs/a b")), "a+b", "a%20b", 1))
	if code, msg := h.post(bearer(hookToken), body); code != http.StatusNoContent {
		t.Fatalf("%d %s", code, msg)
	}
	if code, msg := h.post(bearer(hookToken), s3Event(h.st.name, "fs/a b")); code != http.StatusNoContent {
		t.Fatalf("%d %s", code, msg)
	}
	if s := h.im.EventStats(); s.Pending != 1 {
		t.Fatalf("%d keys pending, want one", s.Pending)
	}
	before := h.heads()
	h.run()
	h.waitApplied(1)
	if n := h.heads() - before; n != 1 {
		t.Fatalf("one key named three times cost %d HEADs", n)
	}
}

func TestWebhookHEADsKeepToTheRateCapAndTheRestWaitsPending(t *testing.T) {
	const (
		perSecond = 10
		burst     = 5
		workers   = 4
	)
	h := newHookEnv(t, ImporterConfig{WebhookRate: perSecond, WebhookBurst: burst})
	start, before := time.Now(), h.heads()
	h.run()
	if code, msg := h.post(bearer(hookToken), s3Event(h.st.name, madeUp(300)...)); code != http.StatusNoContent {
		t.Fatalf("%d %s", code, msg)
	}
	// Wait for 40 HEADs (about 3.5 s at the cap), then compare with what
	// the cap allows in the time taken, measured after the count so that
	// a slow machine only loosens the bound. Unlimited, 40 HEADs of a
	// local store take well under that.
	var n uint64
	for deadline := time.Now().Add(60 * time.Second); ; {
		if n = h.heads() - before; n >= 40 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d HEADs in a minute", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	pending := h.im.EventStats().Pending
	elapsed := time.Since(start).Seconds()
	if allowed := burst + workers + 1.5*perSecond*elapsed; float64(n) > allowed {
		t.Fatalf("%d HEADs in %.2fs; the cap of %d/s (burst %d) allows about %.0f", n, elapsed, perSecond, burst, allowed)
	}
	if pending == 0 {
		t.Fatal("nothing pending while the cap holds 300 keys back")
	}
}

// snsBody marshals m as SNS posts it.
func snsBody(t *testing.T, m *sns.Message) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const testTopic = "arn:aws:sns:" + snstest.Region + ":123456789012:bucket-events"

// basicToken is how SNS authenticates with the endpoint URL
// https://bucketfs:TOKEN@HOST/events.
func basicToken() string {
	req, _ := http.NewRequest("POST", "/", nil)
	req.SetBasicAuth("bucketfs", hookToken)
	return req.Header.Get("Authorization")
}

// The fake SNS (snstest) stands in for AWS, which cannot be reached from
// here: its own key and self-signed certificate, served through the HTTP
// client the verifier is given.
func TestAnSNSSubscriptionIsConfirmedOnlyWithTheTokenAndAValidSignature(t *testing.T) {
	h := newHookEnv(t, ImporterConfig{WebhookRate: rate.Inf})
	confirmation := func() *sns.Message {
		return &sns.Message{Type: sns.TypeSubscriptionConfirmation, MessageID: "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
			TopicArn: testTopic, Token: "2336412f37f", Message: "You have chosen to subscribe to the topic " + testTopic + ".",
			SubscribeURL: snstest.SubscribeURL(testTopic), Timestamp: "2026-11-30T12:00:00.000Z"}
	}
	m := confirmation()
	h.sns.Sign(t, m, "1")
	if code, _ := h.post("", snsBody(t, m)); code != http.StatusUnauthorized {
		t.Fatalf("a confirmation without the token: %d, want 401", code)
	}
	forged := confirmation()
	h.sns.Sign(t, forged, "2")
	forged.SubscribeURL = snstest.SubscribeURL(testTopic + "-other")
	if code, _ := h.post(basicToken(), snsBody(t, forged)); code != http.StatusForbidden {
		t.Fatalf("a confirmation changed after signing: %d, want 403", code)
	}
	if got := h.sns.Visited(); len(got) != 0 {
		t.Fatalf("subscription URLs visited before a valid confirmation: %q", got)
	}
	if code, msg := h.post(basicToken(), snsBody(t, m)); code != http.StatusNoContent {
		t.Fatalf("a valid confirmation: %d %s", code, msg)
	}
	if got := h.sns.Visited(); len(got) != 1 || got[0] != m.SubscribeURL {
		t.Fatalf("visited %q, want the subscribe URL once", got)
	}
	if n := h.sns.CertFetches(); n != 1 {
		t.Fatalf("the signing certificate was fetched %d times, want once", n)
	}
}

func TestAnSNSNotificationQueuesTheKeysOfTheS3EventItCarries(t *testing.T) {
	h := newHookEnv(t, ImporterConfig{WebhookRate: rate.Inf})
	ctx := context.Background()
	body := []byte("from the bucket side")
	if _, err := h.st.bucket.Put(ctx, "n.txt", bytes.NewReader(body), int64(len(body)), bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	m := &sns.Message{Type: sns.TypeNotification, MessageID: "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324", TopicArn: testTopic,
		Subject: "Amazon S3 Notification", Message: string(s3Event(h.st.name, "fs/n.txt")),
		Timestamp: "2026-11-30T12:00:00.000Z"}
	h.sns.Sign(t, m, "2")
	tampered := *m
	tampered.Message = string(s3Event(h.st.name, "fs/other.txt"))
	if code, _ := h.post(basicToken(), snsBody(t, &tampered)); code != http.StatusForbidden {
		t.Fatalf("a notification changed after signing: %d, want 403", code)
	}
	if s := h.im.EventStats(); s.Pending != 0 {
		t.Fatalf("a forged notification queued %d keys", s.Pending)
	}
	if code, msg := h.post(basicToken(), snsBody(t, m)); code != http.StatusNoContent {
		t.Fatalf("a valid notification: %d %s", code, msg)
	}
	h.run()
	h.waitApplied(1)
	in, err := h.m.Lookup(ctx, meta.RootIno, "n.txt")
	if err != nil || in.Size != int64(len(body)) {
		t.Fatalf("n.txt after its notification: %+v, %v", in, err)
	}
}

// The webhook's record of a version this process's exporter made (its
// versionId and eTag, as AWS and MinIO send them) is the echo of an
// export: applied without a HEAD. A record of another version of the
// same key, or one without a version id, costs its HEAD as before.
func TestTheWebhooksEchoOfAnExportCostsNoHEAD(t *testing.T) {
	h := newHookEnv(t, ImporterConfig{WebhookRate: rate.Inf})
	h.run()
	event := func(key, version, etag string) []byte {
		var msg map[string][]map[string]any
		if err := json.Unmarshal(s3Event(h.st.name, key), &msg); err != nil {
			t.Fatal(err)
		}
		obj := msg["Records"][0]["s3"].(map[string]any)["object"].(map[string]any)
		obj["versionId"], obj["eTag"] = version, etag
		b, _ := json.Marshal(msg)
		return b
	}
	// What the exporter tells the importer of an upload of "echo" (the
	// key below the prefix).
	h.im.echoes.uploading("echo")(bucket.ObjectInfo{Key: "echo", VersionID: "v-ours", ETag: "e-ours"}, nil)
	before := h.heads()
	if code, msg := h.post(bearer(hookToken), event("fs/echo", "v-ours", `"e-ours"`)); code != http.StatusNoContent {
		t.Fatalf("%d %s", code, msg)
	}
	h.waitApplied(1)
	if n := h.heads() - before; n != 0 {
		t.Fatalf("the echo of an export cost %d HEADs", n)
	}
	if s := h.im.EventStats(); s.Own != 1 {
		t.Fatalf("%d echoes counted, want 1", s.Own)
	}
	for i, body := range [][]byte{event("fs/echo", "v-theirs", `"e-theirs"`), event("fs/echo", "v-ours", `"e-ours"`), s3Event(h.st.name, "fs/echo")} {
		// The second: the echo was taken once already.
		before := h.heads()
		if code, msg := h.post(bearer(hookToken), body); code != http.StatusNoContent {
			t.Fatalf("%d %s", code, msg)
		}
		h.waitApplied(int64(2 + i))
		if n := h.heads() - before; n != 1 {
			t.Fatalf("record %d cost %d HEADs, want 1", i, n)
		}
	}
}
