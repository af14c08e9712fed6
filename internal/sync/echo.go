package sync

import (
	"slices"
	"strings"
	gosync "sync"

	"bucketfs/internal/bucket"
)

// The embedded store sends an event for every version written, the
// exporter's own uploads included: the echo of an export. Revalidating
// an echo costs a HEAD and finds nothing new (ownVersions says why), and
// the echo usually comes before the exporter has recorded its upload (the
// store sends it before its response reaches the exporter). So the
// exporter tells the importer of each upload it sends (Exporter.echoed):
// while one of a key is under way, a notification of that key that names
// the versions it made waits (park) and is queued again when the upload
// ends, by which time the version the upload made is known here (take).
//
// maxEchoes bounds the versions remembered; past it the oldest are
// forgotten, and their echoes cost a HEAD, as before.
const maxEchoes = 4096

type echoes struct {
	mu       gosync.Mutex
	inflight map[string]int                 // uploads of a key under way
	parked   map[string]*pendingKey         // notifications of a key waiting for them
	made     map[string][]bucket.ObjectInfo // versions uploaded, not yet echoed
	order    []string                       // keys of made, oldest first (may repeat)
	requeue  func(key string, p *pendingKey)
}

// uploading notes an upload of key under way and returns the function
// that ends it with what the upload returned.
func (e *echoes) uploading(key string) func(info bucket.ObjectInfo, err error) {
	e.mu.Lock()
	if e.inflight == nil {
		e.inflight, e.parked, e.made = map[string]int{}, map[string]*pendingKey{}, map[string][]bucket.ObjectInfo{}
	}
	e.inflight[key]++
	e.mu.Unlock()
	return func(info bucket.ObjectInfo, err error) {
		e.mu.Lock()
		if err == nil && info.VersionID != "" {
			if len(e.order) >= maxEchoes {
				old := e.order[0]
				e.order = e.order[1:]
				if vs := e.made[old]; len(vs) > 1 {
					e.made[old] = vs[1:]
				} else {
					delete(e.made, old)
				}
			}
			e.made[key] = append(e.made[key], info)
			e.order = append(e.order, key)
		}
		e.inflight[key]--
		var p *pendingKey
		if e.inflight[key] == 0 {
			delete(e.inflight, key)
			p = e.parked[key]
			delete(e.parked, key)
		}
		requeue := e.requeue
		e.mu.Unlock()
		if p != nil && requeue != nil {
			requeue(key, p)
		}
	}
}

// park keeps p, a notification of key, while an upload of key is under
// way, and reports whether it did.
func (e *echoes) park(key string, p *pendingKey) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inflight[key] == 0 {
		return false
	}
	if q := e.parked[key]; q != nil {
		q.merge(p)
	} else {
		e.parked[key] = p
	}
	return true
}

// take returns the versions of made that no upload of this process
// made, forgetting those it did (each is echoed once).
func (e *echoes) take(key string, made []bucket.ObjectInfo) []bucket.ObjectInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	var rest []bucket.ObjectInfo
	for _, m := range made {
		vs := e.made[key]
		i := slices.IndexFunc(vs, func(v bucket.ObjectInfo) bool { return sameWrite(v.VersionID, v.ETag, m.VersionID, m.ETag) })
		if i < 0 {
			rest = append(rest, m)
			continue
		}
		if vs = slices.Delete(vs, i, i+1); len(vs) == 0 {
			delete(e.made, key)
		} else {
			e.made[key] = vs
		}
	}
	return rest
}

// waiting reports whether an upload of key is under way, or a
// notification of it parked until the upload ends.
func (e *echoes) waiting(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inflight[key] > 0 || e.parked[key] != nil
}

// sameWrite reports whether two descriptions of a version name one write
// of a key: the same version id and the same ETag, quoted or not.
func sameWrite(versionA, etagA, versionB, etagB string) bool {
	return versionA == versionB && strings.Trim(etagA, `"`) == strings.Trim(etagB, `"`)
}
