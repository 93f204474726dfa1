package dataguard

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// What etcd reads first when it restarts on its data directory, checked by
// hand so that the guard stays a binary of the standard library's size:
//
//   - every write-ahead log file (member/wal/*.wal) begins with a CRC
//     record followed by the metadata record, whose checksum chains from
//     it; etcd writes both and syncs them before it renames a new segment
//     to its .wal name, so a file that does not is damaged, not torn;
//   - the backend (member/snap/db) is a bbolt file with at least one valid
//     meta page (bbolt falls back on the other when one is damaged), and
//     the file holds every page that meta page says is in use.
//
// Only what is certainly unusable is refused: a member refused is replaced,
// and a guard that refused healthy data would replace every member it
// restarts. What etcd checks deeper (the records after the first two, the
// B+tree) is left to etcd; a member that keeps failing on it is caught by
// the member controller's crash-loop limit.

// WAL record types, as etcd numbers them.
const (
	walMetadataType = 1
	walCRCType      = 4
)

// walHeaderMax bounds a header record: the CRC record is a few bytes and
// the metadata record two IDs.
const walHeaderMax = 1 << 20

// walCRCTable is the table etcd's log checksums use.
var walCRCTable = crc32.MakeTable(crc32.Castagnoli)

// damage returns what makes dataDir unusable to etcd, or "" when the checks
// pass; err is for what could not be read at all (not a sign of damage).
func damage(dataDir string) (string, error) {
	walDir := filepath.Join(dataDir, "member", "wal")
	entries, err := os.ReadDir(walDir)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", walDir, err)
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".wal") {
			continue
		}
		if problem, err := walStartDamage(filepath.Join(walDir, e.Name())); problem != "" || err != nil {
			return problem, err
		}
	}
	return backendDamage(filepath.Join(dataDir, "member", "snap", "db"))
}

// walStartDamage checks that a log file begins as etcd begins every one.
func walStartDamage(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("opening %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	name := filepath.Join("member", "wal", filepath.Base(path))
	crcRec, problem, err := readWALRecord(f)
	if problem != "" || err != nil {
		return damaged(name, "its first record", problem), err
	}
	if crcRec.typ != walCRCType {
		return damaged(name, "its first record", fmt.Sprintf("is of type %d, not the CRC record every log file begins with", crcRec.typ)), nil
	}
	meta, problem, err := readWALRecord(f)
	if problem != "" || err != nil {
		return damaged(name, "its metadata record", problem), err
	}
	if meta.typ != walMetadataType {
		return damaged(name, "its second record", fmt.Sprintf("is of type %d, not the metadata record", meta.typ)), nil
	}
	if want := crc32.Update(crcRec.crc, walCRCTable, meta.data); meta.crc != want {
		return damaged(name, "its metadata record", fmt.Sprintf("fails its checksum (%08x, want %08x)", meta.crc, want)), nil
	}
	return "", nil
}

func damaged(file, what, problem string) string {
	if problem == "" {
		return ""
	}
	return fmt.Sprintf("%s is damaged: %s %s", file, what, problem)
}

// walRecord is the part of etcd's walpb.Record the guard reads.
type walRecord struct {
	typ  int64
	crc  uint32
	data []byte
}

// readWALRecord reads one framed record: a little-endian length whose top
// byte may carry the padding to 8 bytes, then the record (protobuf) and
// its padding. A problem says what is wrong with the bytes read; err is a
// failure to read them.
func readWALRecord(r io.Reader) (walRecord, string, error) {
	var frame [8]byte
	if _, err := io.ReadFull(r, frame[:]); err != nil {
		problem, err := readProblem(err)
		return walRecord{}, problem, err
	}
	lenField := binary.LittleEndian.Uint64(frame[:])
	size, pad := lenField&^(uint64(0xff)<<56), uint64(0)
	if lenField>>63 == 1 {
		pad = (lenField >> 56) & 0x7
	}
	if size == 0 || size > walHeaderMax {
		return walRecord{}, fmt.Sprintf("has an impossible length (%d bytes)", size), nil
	}
	buf := make([]byte, size+pad)
	if _, err := io.ReadFull(r, buf); err != nil {
		problem, err := readProblem(err)
		return walRecord{}, problem, err
	}
	rec, problem := decodeWALRecord(buf[:size])
	return rec, problem, nil
}

// readProblem turns a short read into a problem of the file, and passes
// any other error on.
func readProblem(err error) (string, error) {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "is cut short", nil
	}
	return "", err
}

// decodeWALRecord decodes the protobuf of a record: type (field 1,
// varint), crc (field 2, varint), data (field 3, bytes).
func decodeWALRecord(b []byte) (walRecord, string) {
	var rec walRecord
	seen := false
	for len(b) > 0 {
		f, problem := nextProtoField(b)
		if problem != "" {
			return rec, problem
		}
		switch f.number {
		case 1:
			rec.typ, seen = int64(f.value), true
		case 2:
			rec.crc = uint32(f.value)
		case 3:
			rec.data = f.data
		}
		b = f.rest
	}
	if !seen {
		return rec, "does not decode (no record type)"
	}
	return rec, ""
}

// protoField is one field of a protobuf message: a varint's value or a
// length-delimited field's bytes, and what follows it.
type protoField struct {
	number, value uint64
	data, rest    []byte
}

// nextProtoField decodes the field at the start of b.
func nextProtoField(b []byte) (protoField, string) {
	key, n := binary.Uvarint(b)
	if n <= 0 {
		return protoField{}, "does not decode (a bad field key)"
	}
	b = b[n:]
	switch key & 7 {
	case 0:
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return protoField{}, "does not decode (a bad number)"
		}
		return protoField{number: key >> 3, value: v, rest: b[n:]}, ""
	case 2:
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return protoField{}, "does not decode (a bad length)"
		}
		end := n + int(l)
		return protoField{number: key >> 3, data: b[n:end], rest: b[end:]}, ""
	}
	return protoField{}, fmt.Sprintf("does not decode (wire type %d)", key&7)
}

// bbolt's file format: a meta page begins after a 16-byte page header;
// its fields are in the machine's byte order, and its checksum is FNV-1a
// over the 56 bytes before it.
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltPageHeader = 16
	boltMetaSize   = 64
)

// boltMeta is what the guard reads of a valid meta page.
type boltMeta struct {
	pageSize uint64
	pgid     uint64 // the high water mark: pages in use
	txid     uint64
}

// backendDamage checks the backend as bbolt opens it.
func backendDamage(path string) (string, error) {
	const name = "member/snap/db"
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return name + " (the backend database) is missing", nil
	}
	if err != nil {
		return "", fmt.Errorf("opening %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	metas, err := boltMetas(f, info.Size())
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	if len(metas) == 0 {
		return fmt.Sprintf("%s is damaged: it is not a bbolt database (%d bytes, neither meta page is valid)", name, info.Size()), nil
	}
	// bbolt uses the valid meta page with the higher transaction ID.
	m := slices.MaxFunc(metas, func(a, b boltMeta) int { return cmp.Compare(a.txid, b.txid) })
	if need := m.pgid * m.pageSize; uint64(info.Size()) < need {
		return fmt.Sprintf("%s is damaged: it is cut short (%d bytes; its meta page says %d pages of %d bytes are in use)",
			name, info.Size(), m.pgid, m.pageSize), nil
	}
	return "", nil
}

// boltMetas returns the valid meta pages, found as bbolt finds them: the
// first at offset 0, the second one page further (its size read from the
// first, or, when the first is damaged, tried from 1 KiB up to 16 MiB).
func boltMetas(f io.ReaderAt, size int64) ([]boltMeta, error) {
	var out []boltMeta
	first, ok, err := readBoltMeta(f, 0)
	if err != nil {
		return nil, err
	}
	offsets := []int64{}
	if ok {
		out = append(out, first)
		offsets = append(offsets, int64(first.pageSize))
	} else {
		for i := range 15 {
			offsets = append(offsets, 1024<<i)
		}
	}
	for _, off := range offsets {
		if off+boltPageHeader+boltMetaSize > size {
			break
		}
		m, ok, err := readBoltMeta(f, off)
		if err != nil {
			return nil, err
		}
		if ok && (len(out) == 0 || m.pageSize == uint64(off)) {
			return append(out, m), nil
		}
	}
	return out, nil
}

// readBoltMeta reads and validates the meta page at off.
func readBoltMeta(f io.ReaderAt, off int64) (boltMeta, bool, error) {
	var page [boltPageHeader + boltMetaSize]byte
	if _, err := f.ReadAt(page[:], off); err != nil {
		if errors.Is(err, io.EOF) {
			return boltMeta{}, false, nil
		}
		return boltMeta{}, false, err
	}
	b := page[boltPageHeader:]
	order := binary.NativeEndian
	if order.Uint32(b[0:]) != boltMagic || order.Uint32(b[4:]) != boltVersion {
		return boltMeta{}, false, nil
	}
	h := fnv.New64a()
	_, _ = h.Write(b[:56])
	if h.Sum64() != order.Uint64(b[56:]) {
		return boltMeta{}, false, nil
	}
	m := boltMeta{pageSize: uint64(order.Uint32(b[8:])), pgid: order.Uint64(b[40:]), txid: order.Uint64(b[48:])}
	if m.pageSize == 0 {
		return boltMeta{}, false, nil
	}
	return m, true, nil
}
