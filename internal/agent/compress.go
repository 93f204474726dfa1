package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"

	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// zstdSuffix ends the name of a compressed snapshot: <name>.db.zst.
const zstdSuffix = ".zst"

// zstdMagic opens every zstd frame. A snapshot is a bbolt file, whose first
// page starts with its page ID, 0: the two never look alike.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// decompressedTmp is the decompressed copy of a compressed snapshot in the
// data (or scratch) directory, removed with the rest of the staging.
const decompressedTmp = ".restore-decompressed.db"

// compressing returns a reader of r compressed with zstd, and a function
// that stops the compression early (when the store gave up). An error of
// r comes out of the returned reader as it was.
func compressing(r io.Reader) (io.Reader, func()) {
	pr, pw := io.Pipe()
	go func() {
		enc, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedDefault))
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		_, err = io.Copy(enc, r)
		if cerr := enc.Close(); err == nil {
			err = cerr
		}
		pw.CloseWithError(err) // nil: the reader sees io.EOF
	}()
	return pr, func() { _ = pr.Close() }
}

// decompressed returns a file holding etcd's snapshot: file itself when it
// is not compressed, else a decompressed copy in dir. What was stored is
// recognised by its content, so a compressed file restores whatever its
// name or manifest say.
func decompressed(ctx context.Context, file, dir string) (string, error) {
	f, err := os.Open(file) //nolint:gosec // the snapshot this run fetched
	if err != nil {
		return "", fileError(err, "opening "+file)
	}
	defer func() { _ = f.Close() }()
	head := make([]byte, len(zstdMagic))
	if _, err := io.ReadFull(f, head); err != nil || !bytes.Equal(head, zstdMagic) {
		return file, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", fileError(err, "reading "+file)
	}
	dec, err := zstd.NewReader(f, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return "", fileError(err, "reading "+file)
	}
	defer dec.Close()
	out := filepath.Join(dir, decompressedTmp)
	w, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600) //nolint:gosec // the staging file
	if err != nil {
		return "", fileError(err, "creating "+out)
	}
	src := &readTrap{r: contextReader{ctx, dec}}
	_, err = io.Copy(w, src)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	switch {
	case err == nil:
		return out, nil
	case src.err != nil && ctx.Err() == nil:
		// The decoder refused the data (a bad frame, a checksum that
		// does not match, a file cut short).
		return "", permanent(conditions.ReasonSnapshotCorrupt, "decompressing %s: %v: the compressed snapshot is damaged", file, src.err)
	case ctx.Err() != nil:
		return "", transient(conditions.ReasonRestoreFailed, "decompressing %s: %v", file, ctx.Err())
	}
	return "", fileError(err, "decompressing "+file)
}

// readTrap remembers the error its reader returned, to tell a damaged
// compressed file from a full volume.
type readTrap struct {
	r   io.Reader
	err error
}

func (t *readTrap) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		t.err = err
	}
	return n, err
}

// contextReader stops a long copy when the run's deadline passes.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
