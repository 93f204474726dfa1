package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/seed74754924/etcd-operator/internal/agent/agentenv"
	"github.com/seed74754924/etcd-operator/internal/agent/report"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// Names in the data directory. Only memberDir is etcd's: the others are the
// agent's staging, removed on success, on failure and before every attempt.
const (
	memberDir   = "member"
	stagingDir  = ".restore-staging"
	downloadTmp = ".restore-download.db"
	// decompressedTmp (compress.go) is staging too.
)

// walReserve is room for etcd's first write-ahead log segment, which it
// preallocates (64 MiB) right after a restore.
const walReserve = 64 << 20

// Restore seeds an empty data directory from a snapshot, as the member the
// configuration names, and only for the seed of a cluster that never
// formed. The data directory is left as it was unless the whole restore
// worked: etcd's member directory appears by one rename at the end.
func Restore(ctx context.Context, cfg RestoreConfig, log *slog.Logger) (report.Result, int) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	done, err := restoreNeeded(cfg, log)
	if err != nil {
		return failure(err, conditions.ReasonRestoreFailed)
	}
	if done {
		return report.Result{Message: "nothing to restore"}, 0
	}
	if err := clearStaging(cfg.DataDir); err != nil {
		return failure(err, conditions.ReasonRestoreFailed)
	}
	res, err := restore(ctx, cfg, log)
	if cerr := clearStaging(cfg.DataDir); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return failure(err, conditions.ReasonRestoreFailed)
	}
	return res, 0
}

// restoreNeeded tells whether there is work: not once etcd's data is there,
// and never outside a new cluster's seed (an empty data directory of a
// formed cluster is a lost member to replace, not a restore).
func restoreNeeded(cfg RestoreConfig, log *slog.Logger) (done bool, err error) {
	if cfg.State != "" && cfg.State != "new" {
		log.Info("The cluster has formed before: nothing is restored", "initialClusterState", cfg.State)
		return true, nil
	}
	_, err = os.Stat(filepath.Join(cfg.DataDir, memberDir))
	switch {
	case err == nil:
		log.Info("The data directory holds a member already: nothing to restore", "dataDir", cfg.DataDir)
		return true, nil
	case !errors.Is(err, fs.ErrNotExist):
		return false, transient(conditions.ReasonRestoreFailed, "looking into the data directory: %v", err)
	}
	return false, nil
}

func clearStaging(dataDir string) error {
	for _, p := range []string{stagingDir, downloadTmp, decompressedTmp} {
		if err := os.RemoveAll(filepath.Join(dataDir, p)); err != nil {
			return transient(conditions.ReasonRestoreFailed, "clearing %s: %v", p, err)
		}
	}
	return nil
}

// source is the snapshot to restore, as found before anything is copied.
type source struct {
	st      store
	file    string
	size    int64
	sha256  string // "" when unknown
	version string // "" when unknown
	// dbSize is the size of etcd's snapshot in a compressed file, from its
	// manifest (0 when unknown or not compressed).
	dbSize   int64
	localDir string // set when the file can be read where it is (a volume)
}

func restore(ctx context.Context, cfg RestoreConfig, log *slog.Logger) (report.Result, error) {
	if err := findEtcdutl(cfg.Etcdutl); err != nil {
		return report.Result{}, err
	}
	src, err := findSource(ctx, cfg.Source)
	if err != nil {
		return report.Result{}, err
	}
	if err := checkVersion(src.version, cfg.TargetVersion, src.st.URI(src.file)); err != nil {
		return report.Result{}, err
	}
	if err := checkSpace(cfg.DataDir, src); err != nil {
		return report.Result{}, err
	}
	log.Info("Restoring", "from", src.st.URI(src.file), "bytes", src.size, "etcdVersion", src.version, "into", cfg.DataDir)
	file, err := fetch(ctx, cfg.DataDir, src)
	if err != nil {
		return report.Result{}, err
	}
	if file, err = decompressed(ctx, file, cfg.DataDir); err != nil {
		return report.Result{}, err
	}
	if src.version == "" {
		if src.version = snapshotVersion(ctx, cfg.Etcdutl, file); src.version != "" {
			if err := checkVersion(src.version, cfg.TargetVersion, src.st.URI(src.file)); err != nil {
				return report.Result{}, err
			}
		}
	}
	if err := runEtcdutl(ctx, cfg, file); err != nil {
		return report.Result{}, err
	}
	if err := os.Rename(filepath.Join(cfg.DataDir, stagingDir, memberDir), filepath.Join(cfg.DataDir, memberDir)); err != nil {
		return report.Result{}, transient(conditions.ReasonRestoreFailed, "moving the restored member into place: %v", err)
	}
	if err := syncDir(cfg.DataDir); err != nil {
		return report.Result{}, err
	}
	res := report.Result{URI: src.st.URI(src.file), SizeBytes: src.size, EtcdVersion: src.version}
	if src.sha256 != "" {
		res.Checksum = "sha256:" + src.sha256
	}
	log.Info("Restored", "member", cfg.Name, "dataDir", cfg.DataDir)
	return res, nil
}

func findEtcdutl(p string) error {
	info, err := os.Stat(p)
	if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
		return permanent(conditions.ReasonRestoreToolNotFound, "etcdutl is not an executable file at %s (the restore runs in the etcd image of the cluster's version)", p)
	}
	return nil
}

// findSource opens the store holding the snapshot and reads what is known
// of it: its size, and from its manifest (or S3 metadata) its checksum and
// the etcd version it came from.
func findSource(ctx context.Context, l Location) (*source, error) {
	exact := l.SubPath
	if l.Kind == agentenv.DestinationS3 {
		exact = l.S3.Key
	}
	clean, err := cleanRelative(exact, "snapshot path")
	if err != nil {
		return nil, err
	}
	dir, file := path.Split(clean)
	st, err := openStore(l, strings.TrimSuffix(dir, "/"))
	if err != nil {
		return nil, err
	}
	info, err := st.Stat(ctx, file)
	if err != nil {
		return nil, err
	}
	if info == nil {
		return nil, permanent(conditions.ReasonSnapshotNotFound, "%s does not exist", st.URI(file))
	}
	src := &source{st: st, file: file, size: info.Size, version: info.Meta.EtcdVersion}
	if fs, ok := st.(*fileStore); ok {
		src.localDir = fs.dir
	}
	m, err := readManifest(ctx, st, file)
	if err != nil {
		return nil, err
	}
	if m != nil {
		if m.Size != 0 && m.Size != info.Size {
			return nil, permanent(conditions.ReasonChecksumMismatch, "%s has %d bytes, its manifest says %d: the file is damaged or was replaced", st.URI(file), info.Size, m.Size)
		}
		src.sha256 = m.SHA256
		if m.Compression != "" {
			src.dbSize = m.DBSize
		}
		if m.Version != "" {
			src.version = m.Version
		}
	}
	return src, nil
}

// checkVersion refuses a snapshot of a newer etcd minor than the target:
// etcd's storage format moves forward with the minor, never back.
func checkVersion(snapshot, target, uri string) error {
	if snapshot == "" || target == "" {
		return nil
	}
	sMaj, sMin, ok1 := majorMinor(snapshot)
	tMaj, tMin, ok2 := majorMinor(target)
	if !ok1 || !ok2 {
		return nil
	}
	if sMaj > tMaj || (sMaj == tMaj && sMin > tMin) {
		return permanent(conditions.ReasonSnapshotFromNewerEtcd,
			"%s was taken from etcd %s; it cannot be restored into etcd %s, an older minor: set spec.version to %d.%d or newer",
			uri, snapshot, target, sMaj, sMin)
	}
	return nil
}

func majorMinor(v string) (int, int, bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// checkSpace makes sure the data volume holds the restored database and
// etcd's first log segment, and the downloaded copy when the snapshot comes
// from S3, before anything is written.
func checkSpace(dataDir string, src *source) error {
	need := src.size + walReserve + src.dbSize // a compressed file is decompressed beside it
	if src.localDir == "" {
		need += src.size
	}
	free, err := freeBytes(dataDir)
	if err != nil {
		return transient(conditions.ReasonRestoreFailed, "reading the free space of %s: %v", dataDir, err)
	}
	if free < need {
		return permanent(conditions.ReasonInsufficientSpace,
			"the data volume has %d MiB free; restoring %s needs %d MiB: give the cluster a larger spec.storage.size",
			free>>20, src.st.URI(src.file), need>>20)
	}
	return nil
}

// freeBytes is the space a non-root user may still write on the volume of
// dir (a variable, so tests can shrink the volume).
var freeBytes = func(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil //nolint:gosec // block counts fit
}

// fetch makes the snapshot a local file, verifying its checksum when known:
// a volume's file is read where it is, an object is downloaded into the
// data directory.
func fetch(ctx context.Context, dataDir string, src *source) (string, error) {
	if src.localDir != "" {
		file := filepath.Join(src.localDir, src.file)
		if src.sha256 == "" {
			return file, nil
		}
		f, err := os.Open(file)
		if err != nil {
			return "", fileError(err, "opening "+file)
		}
		defer func() { _ = f.Close() }()
		h := newCountingHash(f)
		if _, err := io.CopyBuffer(io.Discard, h, make([]byte, copyBuffer)); err != nil {
			return "", fileError(err, "reading "+file)
		}
		return file, verify(h, src)
	}
	r, err := src.st.Read(ctx, src.file)
	if err != nil {
		return "", err
	}
	defer func() { _ = r.Close() }()
	local := &fileStore{dir: dataDir}
	h := newCountingHash(r)
	if err := local.Write(ctx, downloadTmp, h, src.size, fileMeta{}); err != nil {
		return "", err
	}
	return filepath.Join(dataDir, downloadTmp), verify(h, src)
}

func verify(h *countingHash, src *source) error {
	if h.n != src.size {
		return permanent(conditions.ReasonChecksumMismatch, "read %d bytes of %s, expected %d", h.n, src.st.URI(src.file), src.size)
	}
	if got := h.sum(); src.sha256 != "" && got != src.sha256 {
		return permanent(conditions.ReasonChecksumMismatch,
			"%s has sha256 %s, its manifest says %s: the snapshot is damaged; restore another one", src.st.URI(src.file), got, src.sha256)
	}
	src.sha256 = h.sum()
	return nil
}

// snapshotVersion asks etcdutl which etcd version wrote a snapshot (etcd
// 3.6 and later record it); "" when it cannot tell.
func snapshotVersion(ctx context.Context, etcdutl, file string) string {
	out, err := exec.CommandContext(ctx, etcdutl, "snapshot", "status", file, "--write-out=json").Output()
	if err != nil {
		return ""
	}
	var st struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(out, &st) != nil {
		return ""
	}
	return st.Version
}

// corruptSignatures are what etcdutl says of a snapshot file that is not a
// whole, intact one.
var corruptSignatures = []string{
	"expected sha256", "snapshot missing hash", "snapshot file integrity check failed", "hash mismatch",
	"invalid database", "file size too small", "unexpected eof", "corrupt",
}

// runEtcdutl restores the snapshot into the staging directory with the
// seed's exact identity; etcd's own integrity hash is always checked.
func runEtcdutl(ctx context.Context, cfg RestoreConfig, file string) error {
	args := []string{"snapshot", "restore", file,
		"--data-dir", filepath.Join(cfg.DataDir, stagingDir),
		"--name", cfg.Name,
		"--initial-cluster", cfg.InitialCluster,
		"--initial-cluster-token", cfg.Token,
	}
	if cfg.PeerURL != "" {
		args = append(args, "--initial-advertise-peer-urls", cfg.PeerURL)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, cfg.Etcdutl, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		text := lastLines(out.String(), 3)
		for _, sig := range corruptSignatures {
			if strings.Contains(strings.ToLower(text), strings.ToLower(sig)) {
				return permanent(conditions.ReasonSnapshotCorrupt,
					"etcdutl refused the snapshot as damaged (a database file copied out of a data directory is no snapshot either): %s", text)
			}
		}
		return transient(conditions.ReasonRestoreFailed, "etcdutl snapshot restore failed (%v): %s", err, text)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
