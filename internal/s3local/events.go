package s3local

import (
	"encoding/xml"
	"strings"

	"github.com/gofiber/fiber/v3"
	"github.com/versity/versitygw/s3event"
	"github.com/versity/versitygw/s3response"
)

// eventSender turns versitygw's in-process event hook into Events.
type eventSender struct {
	onEvent func(Event)
}

var _ s3event.S3EventSender = (*eventSender)(nil)

// SendEvent is called by versitygw from the request handler after a
// successful object operation, with the response headers already set.
func (e *eventSender) SendEvent(ctx fiber.Ctx, m s3event.EventMeta) {
	// Requests are path-style ("/bucket/key"); versitygw has already
	// URL-decoded the path by the time handlers run. fiber's Path aliases
	// the request buffer, which the server reuses for the next request:
	// copy it, or the key changes under the subscriber's feet.
	bucket, key, _ := strings.Cut(strings.TrimPrefix(strings.Clone(ctx.Path()), "/"), "/")

	ev := Event{
		Name:   string(m.EventName),
		Bucket: bucket,
		Key:    key,
		Size:   m.ObjectSize,
		ETag:   strings.Clone(strings.Trim(deref(m.ObjectETag), `"`)),
	}
	// EventMeta carries no version id for puts and deletes on a versioned
	// bucket; the response header always has it.
	ev.VersionID = deref(m.VersionId)
	if ev.VersionID == "" {
		ev.VersionID = string(ctx.Response().Header.Peek("x-amz-version-id"))
	}

	if m.EventName == s3event.EventObjectRemovedDeleteObjects {
		// One request, many keys: report each requested key as AWS does, as
		// its own ObjectRemoved:Delete. The body is the request, not the
		// result, so a key the store failed to delete is reported too;
		// subscribers revalidate anyway.
		var req s3response.DeleteObjects
		if err := xml.Unmarshal(ctx.BodyRaw(), &req); err != nil {
			return
		}
		for _, obj := range req.Objects {
			one := ev
			one.Name = string(s3event.EventObjectRemovedDelete)
			one.Key = deref(obj.Key)
			one.VersionID = deref(obj.VersionId)
			e.onEvent(one)
		}
		return
	}
	e.onEvent(ev)
}

// Close has nothing to release.
func (e *eventSender) Close() error { return nil }

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
