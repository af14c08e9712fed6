package sync

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"bucketfs/internal/bucket"
	"bucketfs/internal/sns"
)

// MaxWebhookRecords bounds the records of one webhook request. A request
// with more gets 413 and nothing of it is queued. AWS sends one record per
// notification, MinIO one per request.
const MaxWebhookRecords = 1000

// maxWebhookBody bounds the body of one webhook request.
const maxWebhookBody = 8 << 20

// WebhookConfig configures the webhook (WebhookHandler).
type WebhookConfig struct {
	// Bucket and Prefix select the records that concern the file system.
	Bucket, Prefix string
	// Token is the secret every request must carry, either as a bearer
	// token (Authorization: Bearer TOKEN, what MinIO's webhook target
	// sends with its auth_token setting) or as the password of HTTP basic
	// authentication, with any user name (what SNS sends for an endpoint
	// URL https://bucketfs:TOKEN@HOST/events). Required: with no token
	// every request is refused.
	Token string
	// SNS checks the signatures of Amazon SNS deliveries and confirms
	// subscriptions (nil: sns.NewVerifier(nil), which fetches from AWS).
	// Keep one for the handler's life: it caches certificates.
	SNS *sns.Verifier
	// HandOff, if set, is offered the keys of each request first: it
	// returns true when it took them (to the server holding the sync
	// lease, through the shared store), false to have this importer
	// queue them. An error answers 503, for the sender to retry.
	HandOff func(ctx context.Context, keys []string) (bool, error)
}

// eventRecord is the part of an S3 event notification record we read. AWS,
// MinIO and versitygw send this shape.
type eventRecord struct {
	EventName string `json:"eventName"`
	S3        struct {
		Bucket struct {
			Name string `json:"name"`
		} `json:"bucket"`
		Object struct {
			Key       string `json:"key"`
			VersionID string `json:"versionId"`
			ETag      string `json:"eTag"`
		} `json:"object"`
	} `json:"s3"`
}

// WebhookHandler accepts S3 event notifications for the file system's
// bucket: POSTs of a JSON object with a Records array (as MinIO and other
// stores send them), or Amazon SNS envelopes (how AWS S3 delivers to HTTP
// endpoints) whose signature checks out. It queues every key under the
// prefix for revalidation, each key once, at most WebhookHeadRate keys a
// second (Importer.RunNotifications).
//
// A request without the token gets 401 before anything else is done,
// including reading its body; over 8 MiB or MaxWebhookRecords records,
// 413; malformed, 400; an SNS envelope with a bad signature, 403. A
// valid SubscriptionConfirmation is confirmed at once by visiting its
// SubscribeURL (502 if that fails); an UnsubscribeConfirmation is only
// logged.
func (im *Importer) WebhookHandler(cfg WebhookConfig) http.Handler {
	if cfg.SNS == nil {
		cfg.SNS = sns.NewVerifier(nil)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST S3 event notifications here", http.StatusMethodNotAllowed)
			return
		}
		if !authorized(r, cfg.Token) {
			// SNS sends the credentials of its endpoint URL only when
			// challenged.
			w.Header().Set("WWW-Authenticate", `Basic realm="bucketfs events"`)
			http.Error(w, "the events token is missing or wrong: send Authorization: Bearer TOKEN "+
				"(bucketfs status shows it), or use https://bucketfs:TOKEN@HOST/events", http.StatusUnauthorized)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		records := body
		m, isSNS, err := sns.Parse(body)
		if err != nil {
			http.Error(w, "not an S3 event notification: "+err.Error(), http.StatusBadRequest)
			return
		}
		if isSNS {
			if err := cfg.SNS.Verify(r.Context(), &m); err != nil {
				http.Error(w, err.Error(), http.StatusForbidden)
				return
			}
			switch m.Type {
			case sns.TypeSubscriptionConfirmation:
				if err := cfg.SNS.Confirm(r.Context(), &m); err != nil {
					im.log.Warn("SNS subscription not confirmed", "topic", m.TopicArn, "err", err)
					http.Error(w, err.Error(), http.StatusBadGateway)
					return
				}
				im.log.Info("SNS subscription confirmed: S3 events of the topic reach the file system", "topic", m.TopicArn)
				w.WriteHeader(http.StatusNoContent)
				return
			case sns.TypeUnsubscribeConfirmation:
				im.log.Warn("SNS subscription ended: S3 events of the topic no longer reach the file system", "topic", m.TopicArn)
				w.WriteHeader(http.StatusNoContent)
				return
			}
			records = []byte(m.Message)
		}
		var msg struct {
			Records []eventRecord `json:"Records"`
		}
		if err := json.Unmarshal(records, &msg); err != nil {
			http.Error(w, "not an S3 event notification: "+err.Error(), http.StatusBadRequest)
			return
		}
		if n := len(msg.Records); n > MaxWebhookRecords {
			http.Error(w, fmt.Sprintf("%d records in one request, at most %d are taken: none was applied; send fewer at a time",
				n, MaxWebhookRecords), http.StatusRequestEntityTooLarge)
			return
		}
		keys := make([]string, 0, len(msg.Records))
		seen := make(map[string]bool, len(msg.Records))
		// The version each record says it created, where it says: the
		// echo of an export is then applied without a HEAD (ownVersions).
		var made []bucket.ObjectInfo
		for _, rec := range msg.Records {
			if rec.S3.Bucket.Name != cfg.Bucket {
				continue
			}
			// Keys in notifications are URL-encoded, spaces as '+'.
			key, err := url.QueryUnescape(rec.S3.Object.Key)
			if err != nil || !strings.HasPrefix(key, cfg.Prefix) {
				continue
			}
			key = key[len(cfg.Prefix):]
			m := bucket.ObjectInfo{Key: key} // no version id: unknown
			if strings.Contains(rec.EventName, "ObjectCreated:") {
				m.VersionID, m.ETag = rec.S3.Object.VersionID, rec.S3.Object.ETag
			}
			made = append(made, m)
			if !seen[key] {
				seen[key] = true
				keys = append(keys, key)
			}
		}
		if cfg.HandOff != nil && len(keys) > 0 {
			handed, err := cfg.HandOff(r.Context(), keys)
			if err != nil {
				http.Error(w, "the events could not be handed to the server that imports: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			if handed {
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		now := time.Now()
		for _, m := range made {
			im.webhook.add([]string{m.Key}, &m, now)
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// authorized tells whether r carries token as a bearer token or as a basic
// authentication password, comparing in constant time.
func authorized(r *http.Request, token string) bool {
	if token == "" {
		return false
	}
	var got string
	auth := r.Header.Get("Authorization")
	if _, pw, ok := r.BasicAuth(); ok {
		got = pw // any user name: the token is the secret
	} else if len(auth) > len("Bearer ") && strings.EqualFold(auth[:len("Bearer ")], "Bearer ") {
		got = strings.TrimSpace(auth[len("Bearer "):])
	} else {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}
