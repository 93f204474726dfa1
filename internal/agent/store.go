package agent

import (
	"context"
	"encoding/json"
	"io"
	"path"
	"strings"
	"time"

	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// store is a place snapshots are kept: an S3 bucket under a key prefix, or a
// directory of a volume. Names are relative to the prefix or directory.
type store interface {
	// URI names a stored file for people and for status.artifact.uri.
	URI(name string) string
	// Check fails when the store cannot be used at all (no bucket, bad
	// credentials, no directory), before any work is done.
	Check(ctx context.Context) error
	// Stat describes a stored file, or returns nil when there is none.
	Stat(ctx context.Context, name string) (*fileInfo, error)
	// Write stores everything r yields under name. Nobody ever sees a part
	// of it: an interrupted write leaves nothing behind under name.
	Write(ctx context.Context, name string, r io.Reader, sizeHint int64, meta fileMeta) error
	// Read opens a stored file.
	Read(ctx context.Context, name string) (io.ReadCloser, error)
	// Remove deletes a stored file; a missing one is not an error.
	Remove(ctx context.Context, name string) error
	// List names the files directly in the prefix or directory.
	List(ctx context.Context) ([]string, error)
}

// fileInfo is what a store tells about a stored file.
type fileInfo struct {
	Size int64
	// Meta is what the store keeps with the file (S3 object metadata);
	// empty where it keeps nothing (a volume).
	Meta fileMeta
}

// fileMeta is kept with a snapshot where the store can (S3 metadata).
type fileMeta struct {
	SnapshotUID string
	EtcdVersion string
}

// manifestSuffix names the manifest written next to each snapshot file.
const manifestSuffix = ".json"

// manifest is written next to every snapshot as <file>.json: who wrote it,
// what it holds and how to check it. It marks the file as the operator's:
// nothing without a matching manifest is ever overwritten or deleted.
type manifest struct {
	Kind     string     `json:"kind"`
	Snapshot objectRef  `json:"snapshot"`
	Schedule *objectRef `json:"schedule,omitempty"`
	Cluster  string     `json:"cluster,omitempty"`
	File     string     `json:"file"`
	Size     int64      `json:"sizeBytes"`
	SHA256   string     `json:"sha256"`
	// Compression is how the file is compressed ("zstd"; "" for none),
	// and DBSize the size of etcd's snapshot inside it: Size and SHA256
	// are always the stored file's.
	Compression string `json:"compression,omitempty"`
	DBSize      int64  `json:"dbSizeBytes,omitempty"`
	Version     string `json:"etcdVersion,omitempty"`
	Revision    int64  `json:"revision,omitempty"`
	// KeyCount, KVHash and CompactRevision are etcd's count and hash of the
	// keys at Revision: what a verification of the snapshot compares.
	KeyCount        *int64       `json:"keyCount,omitempty"`
	KVHash          *uint32      `json:"kvHash,omitempty"`
	CompactRevision int64        `json:"compactRevision,omitempty"`
	Created         time.Time    `json:"createdAt"`
	Agent           manifestTool `json:"agent"`
}

type objectRef struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

type manifestTool struct {
	Version string `json:"version,omitempty"`
}

// manifestKind is the kind every manifest carries.
const manifestKind = "EtcdSnapshotManifest"

// readManifest reads the manifest of a snapshot file, or returns nil when
// there is none (or it is not one of ours).
func readManifest(ctx context.Context, st store, file string) (*manifest, error) {
	info, err := st.Stat(ctx, file+manifestSuffix)
	if err != nil || info == nil {
		return nil, err
	}
	r, err := st.Read(ctx, file+manifestSuffix)
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }()
	m := &manifest{}
	if err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(m); err != nil || m.Kind != manifestKind {
		return nil, nil //nolint:nilerr // a file that is not a manifest is the same as none
	}
	return m, nil
}

func writeManifest(ctx context.Context, st store, m *manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return st.Write(ctx, m.File+manifestSuffix, strings.NewReader(string(data)+"\n"), int64(len(data)+1),
		fileMeta{SnapshotUID: m.Snapshot.UID, EtcdVersion: m.Version})
}

// ownerOf is the UID of the snapshot that wrote a stored file: from the
// store's metadata, else from its manifest; "" when neither says.
func ownerOf(ctx context.Context, st store, file string, info *fileInfo) (string, error) {
	if info.Meta.SnapshotUID != "" {
		return info.Meta.SnapshotUID, nil
	}
	m, err := readManifest(ctx, st, file)
	if err != nil || m == nil {
		return "", err
	}
	return m.Snapshot.UID, nil
}

// cleanRelative checks a user-given relative path (a subPath, a key) and
// cleans it: it may not climb out of where it is rooted.
func cleanRelative(p, what string) (string, error) {
	if p == "" {
		return "", nil
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", permanent(conditions.ReasonInvalidDestination, "%s %q may not contain '..'", what, p)
		}
	}
	c := path.Clean("/" + p)
	return strings.TrimPrefix(c, "/"), nil
}
