package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// versionRef names one object version.
type versionRef struct{ key, id string }

// listVersions lists every object version of the bucket.
func listVersions(ctx context.Context, c *s3.Client, bucket string) ([]versionRef, error) {
	var refs []versionRef
	pg := s3.NewListObjectVersionsPaginator(c, &s3.ListObjectVersionsInput{Bucket: &bucket})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return refs, err
		}
		for _, ov := range page.Versions {
			refs = append(refs, versionRef{aws.ToString(ov.Key), aws.ToString(ov.VersionId)})
		}
	}
	return refs, nil
}

// watchVersions lists the bucket's versions every 100 ms until stop is
// closed (once more then when final is set: a store that outlives the kill
// shows everything exported before it), and then returns on the channel
// every version it saw, each one made before the restart. Versions made in
// the last moments before a kill that took the store along may be missed:
// the check is then less strict, never wrong.
func watchVersions(c *s3.Client, bucket string, stop <-chan struct{}, final bool) <-chan map[versionRef]bool {
	out := make(chan map[versionRef]bool, 1)
	go func() {
		seen := map[versionRef]bool{}
		list := func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			refs, _ := listVersions(ctx, c, bucket)
			for _, r := range refs {
				seen[r] = true
			}
		}
		for {
			list()
			select {
			case <-stop:
				if final {
					list()
				}
				out <- seen
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return out
}

// setExported records, for every file, the latest state the bucket had
// before the restart: a version of the versions seen then is that file's
// state when its bytes are a state the file had under that key (the
// earliest such state, and only when no other file had the same bytes
// there).
func setExported(ctx context.Context, c *s3.Client, bucket string, m *model, seen map[versionRef]bool) error {
	for ref := range seen {
		if !inPool(ref.key) {
			continue
		}
		data, err := getObject(ctx, c, bucket, ref.key, ref.id)
		if err != nil || data == nil {
			return err
		}
		owner, idx := -1, -1
		for _, f := range m.files {
			for i, s := range f.states {
				if s.name == ref.key && s.c.equal(data) {
					if owner >= 0 && owner != f.id {
						owner = -2 // two files: no floor
					} else if owner == -1 {
						owner, idx = f.id, i
					}
					break
				}
			}
		}
		if owner >= 0 {
			f := m.files[owner]
			f.exported = max(f.exported, idx)
		}
	}
	return nil
}

// checkBucketVersions checks, after the restart and a flush:
//
//   - only real versions in the bucket: every object version (current and
//     noncurrent) whose key is a name of the pool equals a full state that
//     some file had under that very name at some moment. A zero-length
//     object is therefore allowed only where a file really was empty.
//     Directory markers ("d/") and lost+found are not looked at; any other
//     key is a violation.
//   - no incomplete multipart uploads after restart + flush: an upload cut
//     by the kill is aborted (or completed), never left behind.
func checkBucketVersions(ctx context.Context, c *s3.Client, bucket string, m *model) ([]violation, error) {
	var vs []violation
	pg := s3.NewListObjectVersionsPaginator(c, &s3.ListObjectVersionsInput{Bucket: &bucket})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return vs, fmt.Errorf("list object versions: %w", err)
		}
		for _, ov := range page.Versions {
			key := aws.ToString(ov.Key)
			if strings.HasSuffix(key, "/") || strings.HasPrefix(key, lostFoundStart) {
				continue
			}
			data, err := getObject(ctx, c, bucket, key, aws.ToString(ov.VersionId))
			if err != nil {
				return vs, err
			}
			if data == nil {
				continue // removed meanwhile: nothing to judge
			}
			if inPool(key) && realUnder(m, key, data) {
				continue
			}
			where := "noncurrent"
			if aws.ToBool(ov.IsLatest) {
				where = "current"
			}
			v := violation{rule: ruleBucket, file: firstOr(wordFiles(data), firstOr(holdersOf(m, key), -1)), name: key,
				read: describeBytes(data),
				note: strings.TrimSuffix(fmt.Sprintf("%s version %s of %s; %s", where, aws.ToString(ov.VersionId),
					ov.LastModified, identify(m, data)), "; ")}
			switch {
			case !inPool(key):
				v.expected = "no such key: the writer never made this name"
			case v.file >= 0:
				v.expected = describeStatesNamed(m.files[v.file], key)
			default:
				v.expected = "no file ever had this name"
			}
			vs = append(vs, v)
		}
	}
	mp := s3.NewListMultipartUploadsPaginator(c, &s3.ListMultipartUploadsInput{Bucket: &bucket})
	for mp.HasMorePages() {
		page, err := mp.NextPage(ctx)
		if err != nil {
			return vs, fmt.Errorf("list multipart uploads: %w", err)
		}
		for _, u := range page.Uploads {
			key := aws.ToString(u.Key)
			vs = append(vs, violation{rule: ruleMultipart, file: firstOr(holdersOf(m, key), -1), name: key,
				expected: "no upload in progress", read: fmt.Sprintf("upload %s initiated %s", aws.ToString(u.UploadId), u.Initiated)})
		}
	}
	return vs, nil
}

// checkConverged checks that after the flush the current object of every
// name of the pool equals what the mount shows there, and that a name the
// mount does not show has no current object.
func checkConverged(ctx context.Context, c *s3.Client, bucket string, m *model, obs *observation) ([]violation, error) {
	var vs []violation
	for _, name := range names {
		data, err := getObject(ctx, c, bucket, name, "")
		if err != nil {
			return vs, err
		}
		rf, shown := obs.files[name]
		if shown && rf.err != nil {
			continue // reported by the mount check
		}
		if (data == nil) == !shown && bytes.Equal(data, rf.data) {
			continue
		}
		v := violation{rule: ruleConverged, file: firstOr(holdersOf(m, name), -1), name: name,
			expected: "mount shows " + describeShown(rf, shown), read: "bucket has " + describeShown(readFile{data: data}, data != nil)}
		vs = append(vs, v)
	}
	return vs, nil
}

func describeShown(rf readFile, shown bool) string {
	if !shown {
		return "nothing"
	}
	return rf.describe()
}

// getObject reads one object (one version of it when versionID is set);
// nil, nil when it does not exist or its current version is a delete
// marker.
func getObject(ctx context.Context, c *s3.Client, bucket, key, versionID string) ([]byte, error) {
	in := &s3.GetObjectInput{Bucket: &bucket, Key: &key}
	if versionID != "" {
		in.VersionId = &versionID
	}
	out, err := c.GetObject(ctx, in)
	if err != nil {
		var code interface{ ErrorCode() string }
		if errors.As(err, &code) && (code.ErrorCode() == "NoSuchKey" || code.ErrorCode() == "NotFound" ||
			code.ErrorCode() == "NoSuchVersion" || code.ErrorCode() == "MethodNotAllowed") {
			return nil, nil
		}
		return nil, fmt.Errorf("get %s (version %q): %w", key, versionID, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s (version %q): %w", key, versionID, err)
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

// realUnder reports whether data is a full state some file had under name.
func realUnder(m *model, name string, data []byte) bool {
	for _, f := range m.files {
		if _, ok := f.realState(name, data); ok {
			return true
		}
	}
	return false
}

// describeStatesNamed summarises the states file f had under name.
func describeStatesNamed(f *fileModel, name string) string {
	var idx []int
	for i, s := range f.states {
		if s.name == name {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return fmt.Sprintf("f%d never had this name", f.id)
	}
	var parts []string
	if len(idx) > 6 {
		parts = append(parts, fmt.Sprintf("(f%d had %d states under this name; the first 3 and last 3)", f.id, len(idx)))
		idx = append(idx[:3:3], idx[len(idx)-3:]...)
	}
	for _, i := range idx {
		parts = append(parts, f.describeState(i))
	}
	return strings.Join(parts, "\n      ")
}
