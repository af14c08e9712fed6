package main

// Scale: objects PUT straight into the bucket, imported through a fresh
// server on PostgreSQL and one on Pebble: the first ls -l of a big
// directory, the import of the rest, the stat rate, and the bytes of
// database per file.

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	pdb "github.com/cockroachdb/pebble/v2"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"

	"bucketfs/bench/internal/benchkit"
	"bucketfs/internal/kv/postgres"
)

const (
	scalePrefix = "scale/"
	scaleSchema = "scale"
	maxBigDir   = 100_000 // entries of the big directory
	perNested   = 1000    // objects of each nested directory
	listers     = 4       // directories listed at once by the import walk
)

// layout splits the -objects: a tenth, and whatever does not fit the big
// directory of at most 100,000, go to nested directories of 1,000.
func (b *bench) layout() (big, nested int) {
	nested = b.objects / 10
	big = min(b.objects-nested, maxBigDir)
	return big, b.objects - big
}

// objectKey is the key, under the bucket's scale/ prefix, of object i.
func (b *bench) objectKey(i int) string {
	big, _ := b.layout()
	if i < big {
		return fmt.Sprintf("big/f%06d", i)
	}
	j := i - big
	d := j / perNested
	return fmt.Sprintf("tree/a%03d/b%02d/f%06d", d/100, d%100, j%perNested)
}

func (b *bench) scale() error {
	big, nested := b.layout()
	b.Note("scale: %d empty objects PUT with aws-sdk-go-v2 (PutObject, %d at a time) under scale/ of the bucket: %d in scale/big/ and %d in nested directories of %d (scale/tree/aNNN/bNN/)", b.objects, b.putWorkers, big, nested, perNested)
	rPut := newRow(fmt.Sprintf("PUT %d objects (both sides share them)", b.objects), "objects/s", true)
	t0 := time.Now()
	if err := b.putObjects(); err != nil {
		return err
	}
	put := float64(b.objects) / time.Since(t0).Seconds()
	rPut.add(sidePG, put)
	rPut.add(sidePebble, put)
	rFirst := newRow(fmt.Sprintf("first ls -l of big/ (%d entries)", big), "s", false)
	rRest := newRow(fmt.Sprintf("ls -l of every nested directory (%d entries)", nested), "s", false)
	rAll := newRow(fmt.Sprintf("import of all %d (the two above)", b.objects), "files/s", true)
	rStat := newRow(fmt.Sprintf("stat of %d files of big/, fresh mount", min(b.statSample, big)), "files/s", true)
	rSize := newRow("database bytes per file, as left", "bytes", false)
	rCompact := newRow("database bytes per file, compacted (PG: VACUUM FULL; Pebble: flush + compaction)", "bytes", false)
	for _, r := range []*row{rFirst, rRest, rAll} {
		r.Op = "file"
	}
	b.results.Scale = append(b.results.Scale, rPut, rFirst, rRest, rAll, rStat, rSize, rCompact)
	for _, side := range []string{sidePG, sidePebble} {
		fmt.Fprintf(os.Stderr, "-- scale on %s\n", side)
		schema, name := "", "scale-pebble"
		if side == sidePG {
			schema, name = scaleSchema, "scale-pg"
		}
		s, err := b.open(side, name, scalePrefix, schema, "")
		if err != nil {
			return err
		}
		if err := b.scaleOn(s, rFirst, rRest, rAll, rStat, rSize, rCompact); err != nil {
			s.in.Close()
			return fmt.Errorf("scale on %s: %w", side, err)
		}
	}
	return nil
}

// scaleOn measures the import through s (a fresh server over scale/) and
// closes it.
func (b *bench) scaleOn(s *server, rFirst, rRest, rAll, rStat, rSize, rCompact *row) error {
	big, nested := b.layout()
	b.DropCaches()
	var before postgres.Stats
	if s.ps != nil {
		before = s.ps.Stats()
	}
	start := time.Now()
	if err := lsL(filepath.Join(s.in.Mnt, "big"), big); err != nil {
		return err
	}
	first := time.Since(start).Seconds()
	rFirst.add(s.side, first)
	t1 := time.Now()
	if nested > 0 {
		n, err := b.lsTree(filepath.Join(s.in.Mnt, "tree"))
		if err != nil {
			return err
		}
		if n != nested {
			return fmt.Errorf("the nested directories hold %d files, want %d", n, nested)
		}
	}
	rRest.add(s.side, time.Since(t1).Seconds())
	rAll.add(s.side, float64(b.objects)/time.Since(start).Seconds())
	if s.ps != nil {
		rAll.counts(s.side).add(before, s.ps.Stats(), b.objects)
	}
	sample := min(b.statSample, big)
	err := b.inFreshMount(s, "scale-stat", func(mnt string) error {
		t := time.Now()
		if err := statEach(filepath.Join(mnt, "big"), sample, func(i int) int { return i * big / sample }); err != nil {
			return err
		}
		rStat.add(s.side, float64(sample)/time.Since(t).Seconds())
		return nil
	})
	if err != nil {
		return err
	}
	if s.side == sidePG {
		return b.pgSize(s, rSize, rCompact)
	}
	return b.pebbleSize(s, rSize, rCompact)
}

// lsTree lists (ls -l) every directory under root, listers at a time, and
// returns the number of files.
func (b *bench) lsTree(root string) (int, error) {
	var mu sync.Mutex
	files := 0
	level := []string{root}
	for len(level) > 0 {
		var next []string
		err := benchkit.Striped(listers, len(level), func(i int) error {
			if b.Ctx.Err() != nil {
				return b.Ctx.Err()
			}
			d, err := os.Open(level[i])
			if err != nil {
				return err
			}
			defer d.Close()
			names, err := d.Readdirnames(-1)
			if err != nil {
				return err
			}
			var st unix.Stat_t
			var dirs []string
			n := 0
			for _, name := range names {
				if err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					return err
				}
				if st.Mode&unix.S_IFMT == unix.S_IFDIR {
					dirs = append(dirs, filepath.Join(level[i], name))
				} else {
					n++
				}
			}
			mu.Lock()
			files += n
			next = append(next, dirs...)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return files, err
		}
		level = next
	}
	return files, nil
}

// putObjects puts the -objects empty objects with aws-sdk-go-v2,
// -put-workers at a time.
func (b *bench) putObjects() error {
	st := b.store
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = b.putWorkers, b.putWorkers
	// A dial may finish after the request it was for went out on another
	// connection, and leave an idle connection that the store's shutdown
	// would wait 10 s for: close them again at the end.
	defer tr.CloseIdleConnections()
	b.Defer(tr.CloseIdleConnections)
	c := s3.New(s3.Options{
		BaseEndpoint:               aws.String(st.Endpoint),
		Region:                     st.Region,
		Credentials:                credentials.NewStaticCredentialsProvider(st.AccessKey, st.SecretKey, ""),
		UsePathStyle:               true,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		HTTPClient:                 &http.Client{Transport: tr},
	})
	var mu sync.Mutex
	count, last := 0, time.Now()
	err := benchkit.Striped(b.putWorkers, b.objects, func(i int) error {
		if b.Ctx.Err() != nil {
			return b.Ctx.Err()
		}
		_, err := c.PutObject(b.Ctx, &s3.PutObjectInput{Bucket: aws.String(st.Bucket), Key: aws.String(scalePrefix + b.objectKey(i)),
			Body: bytes.NewReader(nil), ContentLength: aws.Int64(0)})
		if err != nil {
			return fmt.Errorf("put %s: %w", b.objectKey(i), err)
		}
		mu.Lock()
		if count++; time.Since(last) > 10*time.Second {
			last = time.Now()
			fmt.Fprintf(os.Stderr, "   %d of %d objects PUT\n", count, b.objects)
		}
		mu.Unlock()
		return nil
	})
	return err
}

// pgSize records the size of the scale schema per file, as it is and after
// VACUUM FULL, and closes s.
func (b *bench) pgSize(s *server, rSize, rCompact *row) error {
	s.in.Close()
	ctx := b.Ctx
	conn, err := pgx.Connect(ctx, b.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	size := func() (kvBytes, schema int64, err error) {
		if err := conn.QueryRow(ctx, "SELECT pg_total_relation_size('"+scaleSchema+".kv')").Scan(&kvBytes); err != nil {
			return 0, 0, err
		}
		err = conn.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`, scaleSchema).Scan(&schema)
		return kvBytes, schema, err
	}
	kvBytes, schema, err := size()
	if err != nil {
		return err
	}
	var rows, keyBytes, valueBytes int64
	if err := conn.QueryRow(ctx, "SELECT count(*), coalesce(sum(octet_length(k)), 0)::bigint, coalesce(sum(octet_length(v)), 0)::bigint FROM "+scaleSchema+".kv").
		Scan(&rows, &keyBytes, &valueBytes); err != nil {
		return err
	}
	// Where the bytes go: the rows by their key's first byte (package
	// meta's key layout: i inode, d directory entry, l link record, k
	// object key, C change record ...).
	kinds, err := conn.Query(ctx, "SELECT chr(get_byte(k, 0)), count(*), sum(octet_length(k))::bigint, sum(octet_length(v))::bigint FROM "+
		scaleSchema+".kv WHERE octet_length(k) > 0 GROUP BY 1 ORDER BY 4 DESC, 2 DESC LIMIT 8")
	if err != nil {
		return err
	}
	var split []string
	for kinds.Next() {
		var kind string
		var count, kb, vb int64
		if err := kinds.Scan(&kind, &count, &kb, &vb); err != nil {
			kinds.Close()
			return err
		}
		split = append(split, fmt.Sprintf("%s: %d rows, %.0f B of key + %.0f B of value per file", kind, count, float64(kb)/float64(b.objects), float64(vb)/float64(b.objects)))
	}
	if kinds.Close(); kinds.Err() != nil {
		return kinds.Err()
	}
	if _, err := conn.Exec(ctx, "VACUUM FULL "+scaleSchema+".kv"); err != nil {
		return err
	}
	kvFull, schemaFull, err := size()
	if err != nil {
		return err
	}
	// The compacted table's heap and its primary key's index, apart.
	var heap, index int64
	if err := conn.QueryRow(ctx, "SELECT pg_relation_size('"+scaleSchema+".kv'), pg_indexes_size('"+scaleSchema+".kv')").Scan(&heap, &index); err != nil {
		return err
	}
	n := float64(b.objects)
	rSize.add(sidePG, float64(schema)/n)
	rCompact.add(sidePG, float64(schemaFull)/n)
	b.Note("scale, PostgreSQL: schema %s holds %s (table kv with its index and TOAST: %s), %.0f bytes per file; after VACUUM FULL of kv %s (kv %s), %.0f per file; kv has %d rows (%.2f per file) of %.0f bytes of key and %.0f of value per file",
		scaleSchema, benchkit.MiB(schema), benchkit.MiB(kvBytes), float64(schema)/n, benchkit.MiB(schemaFull), benchkit.MiB(kvFull), float64(schemaFull)/n,
		rows, float64(rows)/n, float64(keyBytes)/n, float64(valueBytes)/n)
	b.Note("scale, PostgreSQL: after VACUUM FULL the heap of kv takes %.0f bytes per file and its primary key's index %.0f", float64(heap)/n, float64(index)/n)
	b.Note("scale, PostgreSQL: the rows of kv by the first byte of their key (package meta's key layout), largest first: %s", strings.Join(split, "; "))
	return nil
}

// pebbleSize records the size of s's Pebble store (the state directory's
// meta/) per file: after the server closed, and after a flush and a
// compaction of every key. It closes s.
func (b *bench) pebbleSize(s *server, rSize, rCompact *row) error {
	dir := filepath.Join(b.Base, s.name, "meta")
	s.in.Close()
	asIs, err := duBytes(dir)
	if err != nil {
		return err
	}
	db, err := pdb.Open(dir, &pdb.Options{FormatMajorVersion: pdb.FormatNewest, Logger: quietLogger{}})
	if err != nil {
		return err
	}
	err = db.Flush()
	if err == nil {
		err = db.Compact(b.Ctx, []byte{}, bytes.Repeat([]byte{0xff}, 64), true)
	}
	if err := errorsJoin(err, db.Close()); err != nil {
		return err
	}
	compacted, err := duBytes(dir)
	if err != nil {
		return err
	}
	n := float64(b.objects)
	rSize.add(sidePebble, float64(asIs)/n)
	rCompact.add(sidePebble, float64(compacted)/n)
	b.Note("scale, Pebble: meta/ of the state directory holds %s after the server closed (write-ahead log, sstables, manifest), %.0f bytes per file; %s after a flush and a compaction of every key (opened again with Pebble's default options), %.0f per file",
		benchkit.MiB(asIs), float64(asIs)/n, benchkit.MiB(compacted), float64(compacted)/n)
	return nil
}

// duBytes is the disk space of the files under dir (allocated blocks).
func duBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

// quietLogger drops Pebble's informational messages (the replay of the
// write-ahead log when it opens the store again).
type quietLogger struct{}

func (quietLogger) Infof(format string, args ...any)  {}
func (quietLogger) Errorf(format string, args ...any) { pdb.DefaultLogger.Errorf(format, args...) }
func (quietLogger) Fatalf(format string, args ...any) { pdb.DefaultLogger.Fatalf(format, args...) }

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
