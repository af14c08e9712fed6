package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Map file format, little endian:
//
//	magic "BFTM" | version u32 | size i64 | count u32 | count × (off i64, len i64) | crc32c u32
//
// The checksum covers everything before it. A map that fails to decode is
// treated as absent, which only ever makes the tier claim less.

var mapMagic = [4]byte{'B', 'F', 'T', 'M'}

const (
	mapVersion    = 1
	mapHeaderSize = 4 + 4 + 8 + 4
	maxMapRanges  = 1 << 26
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeMap(size int64, ext extents) []byte {
	b := make([]byte, 0, mapHeaderSize+16*len(ext)+4)
	b = append(b, mapMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, mapVersion)
	b = binary.LittleEndian.AppendUint64(b, uint64(size))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ext)))
	for _, r := range ext {
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Off))
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Len))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var errBadMap = errors.New("corrupt extent map")

func decodeMap(b []byte) (size int64, ext extents, err error) {
	if len(b) < mapHeaderSize+4 || [4]byte(b[:4]) != mapMagic {
		return 0, nil, errBadMap
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return 0, nil, errBadMap
	}
	if v := binary.LittleEndian.Uint32(b[4:]); v != mapVersion {
		return 0, nil, fmt.Errorf("extent map version %d: %w", v, errBadMap)
	}
	size = int64(binary.LittleEndian.Uint64(b[8:]))
	count := binary.LittleEndian.Uint32(b[16:])
	if count > maxMapRanges || len(body) != mapHeaderSize+16*int(count) {
		return 0, nil, errBadMap
	}
	if count > 0 {
		ext = make(extents, count)
	}
	for i := range ext {
		p := body[mapHeaderSize+16*i:]
		ext[i] = Range{int64(binary.LittleEndian.Uint64(p)), int64(binary.LittleEndian.Uint64(p[8:]))}
	}
	if size < 0 || !ext.valid() || ext.last() > size {
		return 0, nil, errBadMap
	}
	return size, ext, nil
}

// mapSync says how much of a map write is made durable before writeMap
// returns.
type mapSync int

const (
	mapDurable  mapSync = iota // fsync the file and the directory
	mapFileOnly                // fsync the file before the rename; a later syncfs does the rest
	mapNoSync                  // nothing; a later syncfs does it all
)

// writeMap replaces ino's map file: write a temporary file, fsync it,
// rename it over the map, fsync the directory; sync says which fsyncs are
// left to a later syncfs. The caller must have made every range in ext
// durable in the data file first.
func (t *Tier) writeMap(ino uint64, size int64, ext extents, sync mapSync) error {
	p := t.mapPath(ino)
	tmp := p + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(p), 0o700); err == nil {
			f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		}
	}
	if err != nil {
		return err
	}
	_, err = f.Write(encodeMap(size, ext))
	if err == nil && sync != mapNoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if sync != mapDurable {
		return nil
	}
	return syncDir(filepath.Dir(p))
}

// dropMap durably removes ino's map file, so no crash can bring back a claim
// on data that is about to be destroyed. Requires n.life held exclusively.
func (t *Tier) dropMap(n *inode) error {
	n.mu.Lock()
	onDisk := n.mapOnDisk
	n.mu.Unlock()
	if !onDisk {
		return nil
	}
	p := t.mapPath(n.ino)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		return err
	}
	n.mu.Lock()
	n.mapOnDisk, n.onDisk, n.diskGen = false, nil, 0
	n.mu.Unlock()
	return nil
}

// load rebuilds the inode table from dir. An inode is kept only if both its
// data file and its map exist; anything else is the debris of a crash or of
// state that was never synced, and is deleted.
func (t *Tier) load() error {
	tops, err := os.ReadDir(t.dir)
	if err != nil {
		return fmt.Errorf("tier: open %s: %w", t.dir, err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		work  = make(chan string)
	)
	for range min(runtime.GOMAXPROCS(0), 16) {
		wg.Go(func() {
			for top := range work {
				if err := t.loadTop(top); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, e := range tops {
		if e.IsDir() && isHexByte(e.Name()) {
			work <- filepath.Join(t.dir, e.Name())
		}
	}
	close(work)
	wg.Wait()
	return first
}

func (t *Tier) loadTop(top string) error {
	leaves, err := os.ReadDir(top)
	if err != nil {
		return fmt.Errorf("tier: open %s: %w", top, err)
	}
	for _, e := range leaves {
		if e.IsDir() && isHexByte(e.Name()) {
			if err := t.loadLeaf(filepath.Join(top, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *Tier) loadLeaf(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("tier: open %s: %w", dir, err)
	}
	datas := make(map[uint64]bool)
	maps := make(map[uint64]bool)
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, tmpSuffix) {
			os.Remove(filepath.Join(dir, name))
			continue
		}
		base, kind, ok := strings.Cut(name, ".")
		if !ok || len(base) != 16 {
			continue
		}
		ino, err := strconv.ParseUint(base, 16, 64)
		if err != nil {
			continue
		}
		switch "." + kind {
		case dataSuffix:
			datas[ino] = true
		case mapSuffix:
			maps[ino] = true
		}
	}
	for ino := range maps {
		if !datas[ino] {
			// The data file is gone (a crash during Remove): the map
			// claims nothing that still exists.
			os.Remove(t.mapPath(ino))
		}
	}
	for ino := range datas {
		if !maps[ino] {
			// Never synced, or removed halfway: nothing is claimed.
			os.Remove(t.dataPath(ino))
			continue
		}
		if err := t.loadInode(ino); err != nil {
			return err
		}
	}
	return nil
}

func (t *Tier) loadInode(ino uint64) error {
	b, err := os.ReadFile(t.mapPath(ino))
	if err != nil {
		return opErr("load", ino, err)
	}
	size, ext, err := decodeMap(b)
	if err != nil {
		os.Remove(t.mapPath(ino))
		os.Remove(t.dataPath(ino))
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Stat(t.dataPath(ino), &st); err != nil {
		return opErr("load", ino, err)
	}
	// The map was written only after the data it claims was fsynced, so
	// the data file is at least as long as the last range. Bytes past the
	// size can only be unsynced writes the map does not know about; cut
	// them off so the file reads zeros there, as gap marking assumes.
	if st.Size > size {
		if err := os.Truncate(t.dataPath(ino), size); err != nil {
			return opErr("load", ino, err)
		}
		if err := syscall.Stat(t.dataPath(ino), &st); err != nil {
			return opErr("load", ino, err)
		}
	}
	if st.Size < ext.last() {
		// Should not happen; never claim what the file cannot hold.
		ext.remove(st.Size, 1<<63-1-st.Size)
	}
	n := &inode{
		ino:       ino,
		ext:       ext,
		size:      size,
		present:   ext.total(),
		gen:       1,
		diskGen:   1,
		epoch:     t.epochs.Add(1),
		onDisk:    ext.clone(),
		mapOnDisk: true,
	}
	n.lastUse.Store(max(st.Atim.Nano(), st.Mtim.Nano()))
	n.alloc.Store(st.Blocks * 512)
	t.usage.Add(st.Blocks * 512)
	sh := t.shard(ino)
	sh.mu.Lock()
	sh.m[ino] = n
	sh.mu.Unlock()
	return nil
}

func isHexByte(s string) bool {
	return len(s) == 2 && strings.IndexByte(hexDigits, s[0]) >= 0 && strings.IndexByte(hexDigits, s[1]) >= 0
}
