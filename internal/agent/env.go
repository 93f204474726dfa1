package agent

import (
	"strconv"
	"strings"
	"time"

	"github.com/seed74754924/etcd-operator/internal/agent/agentenv"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// Location is where a snapshot goes to or comes from.
type Location struct {
	Kind string // agentenv.DestinationS3 or agentenv.DestinationPVC
	S3   S3Config
	// MountPath and SubPath address the volume: a directory to write into,
	// or the exact file to restore.
	MountPath string
	SubPath   string
}

func locationFromEnv(get func(string) string) (Location, error) {
	l := Location{Kind: get(agentenv.EnvDestKind), MountPath: get(agentenv.EnvPVCMountPath), SubPath: get(agentenv.EnvPVCSubPath)}
	l.S3 = S3Config{
		Endpoint: get(agentenv.EnvS3Endpoint), Bucket: get(agentenv.EnvS3Bucket), Key: get(agentenv.EnvS3Key), Region: get(agentenv.EnvS3Region),
		AccessKey: get(agentenv.EnvAccessKey), SecretKey: get(agentenv.EnvSecretKey), SessionToken: get(agentenv.EnvSessionToken),
		CABundle: get(agentenv.EnvS3CABundle), StorageClass: get(agentenv.EnvS3StorageClass),
		SSEType: get(agentenv.EnvS3SSEType), SSEKMSKeyID: get(agentenv.EnvS3SSEKMSKeyID), SSECustomerKey: get(agentenv.EnvS3SSECustomerKey),
	}
	l.S3.ForcePathStyle, _ = strconv.ParseBool(get(agentenv.EnvS3PathStyle))
	switch l.Kind {
	case agentenv.DestinationS3:
		if l.S3.Endpoint == "" || l.S3.Bucket == "" {
			return l, permanent(conditions.ReasonAgentMisconfigured, "%s and %s must be set", agentenv.EnvS3Endpoint, agentenv.EnvS3Bucket)
		}
	case agentenv.DestinationPVC:
		if l.MountPath == "" {
			return l, permanent(conditions.ReasonAgentMisconfigured, "%s must be set", agentenv.EnvPVCMountPath)
		}
	default:
		return l, permanent(conditions.ReasonAgentMisconfigured, "%s must be %q or %q, not %q", agentenv.EnvDestKind, agentenv.DestinationS3, agentenv.DestinationPVC, l.Kind)
	}
	return l, nil
}

// EtcdAccess is how the agent reaches etcd.
type EtcdAccess struct {
	Endpoints                 []string
	CAFile, CertFile, KeyFile string
	Username, Password        string
}

// SnapshotConfig is everything the snapshot agent is told.
type SnapshotConfig struct {
	Etcd        EtcdAccess
	Destination Location
	// Snapshot identifies the EtcdSnapshot; Name is also the file name.
	Namespace, Name, UID string
	Cluster              string
	// Schedule is set for a scheduled snapshot, whose retention the agent
	// applies after it stored the snapshot.
	ScheduleName, ScheduleUID string
	KeepLast                  int
	MaxAge                    time.Duration
	// Compression of the stored file: agentenv.CompressionZstd or "".
	Compression string
	// Timeout bounds the whole run.
	Timeout time.Duration
}

// SnapshotConfigFromEnv reads the snapshot agent's settings.
func SnapshotConfigFromEnv(get func(string) string) (SnapshotConfig, error) {
	cfg := SnapshotConfig{
		Etcd: EtcdAccess{
			CAFile: get(agentenv.EnvCAFile), CertFile: get(agentenv.EnvCertFile), KeyFile: get(agentenv.EnvKeyFile),
			Username: get(agentenv.EnvUsername), Password: get(agentenv.EnvPassword),
		},
		Namespace: get(agentenv.EnvNamespace), Name: get(agentenv.EnvSnapshotName), UID: get(agentenv.EnvSnapshotUID), Cluster: get(agentenv.EnvCluster),
		ScheduleName: get(agentenv.EnvScheduleName), ScheduleUID: get(agentenv.EnvScheduleUID),
		Compression: get(agentenv.EnvCompression), Timeout: 25 * time.Minute,
	}
	if cfg.Compression != "" && cfg.Compression != agentenv.CompressionZstd {
		return cfg, permanent(conditions.ReasonAgentMisconfigured, "%s=%q: the agent compresses with %q only", agentenv.EnvCompression, cfg.Compression, agentenv.CompressionZstd)
	}
	for _, e := range strings.Split(get(agentenv.EnvEndpoints), ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.Etcd.Endpoints = append(cfg.Etcd.Endpoints, e)
		}
	}
	if len(cfg.Etcd.Endpoints) == 0 || cfg.Name == "" || cfg.UID == "" {
		return cfg, permanent(conditions.ReasonAgentMisconfigured, "%s, %s and %s must be set", agentenv.EnvEndpoints, agentenv.EnvSnapshotName, agentenv.EnvSnapshotUID)
	}
	if v := get(agentenv.EnvKeepLast); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return cfg, permanent(conditions.ReasonAgentMisconfigured, "%s=%q is not a positive number", agentenv.EnvKeepLast, v)
		}
		cfg.KeepLast = n
	}
	if v := get(agentenv.EnvMaxAge); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return cfg, permanent(conditions.ReasonAgentMisconfigured, "%s=%q is not a positive duration", agentenv.EnvMaxAge, v)
		}
		cfg.MaxAge = d
	}
	var err error
	cfg.Destination, err = locationFromEnv(get)
	return cfg, err
}

// RestoreConfig is everything the restore agent is told.
type RestoreConfig struct {
	Source Location
	// DataDir is the member's data directory; Name, InitialCluster, Token
	// and PeerURL its identity, exactly as etcd is started with.
	DataDir, Name, InitialCluster, Token, PeerURL string
	// State is the seed's initial cluster state: a restore happens only
	// for "new", the seed of a cluster that never formed.
	State string
	// TargetVersion is the etcd version the member runs.
	TargetVersion string
	// Etcdutl is the path of etcdutl in the etcd image.
	Etcdutl string
	Timeout time.Duration
}

// RestoreConfigFromEnv reads the restore agent's settings.
func RestoreConfigFromEnv(get func(string) string) (RestoreConfig, error) {
	cfg := RestoreConfig{
		DataDir: get(agentenv.EnvDataDir), Name: get(agentenv.EnvMemberName), InitialCluster: get(agentenv.EnvInitialCluster),
		Token: get(agentenv.EnvClusterToken), PeerURL: get(agentenv.EnvPeerURL), State: get(agentenv.EnvClusterState),
		TargetVersion: get(agentenv.EnvTargetVersion), Etcdutl: get(agentenv.EnvEtcdutl), Timeout: 30 * time.Minute,
	}
	if cfg.Etcdutl == "" {
		cfg.Etcdutl = agentenv.DefaultEtcdutlPath
	}
	if cfg.DataDir == "" || cfg.Name == "" || cfg.InitialCluster == "" || cfg.Token == "" {
		return cfg, permanent(conditions.ReasonAgentMisconfigured, "%s, %s, %s and %s must be set", agentenv.EnvDataDir, agentenv.EnvMemberName, agentenv.EnvInitialCluster, agentenv.EnvClusterToken)
	}
	var err error
	if cfg.Source, err = locationFromEnv(get); err != nil {
		return cfg, err
	}
	return cfg, exactFile(cfg.Source)
}

// VerifyConfig is everything the verification agent is told: the stored
// snapshot, and what was recorded when it was taken.
type VerifyConfig struct {
	// Source is the exact snapshot file, as for a restore.
	Source Location
	// ScratchDir holds the downloaded copy and the restored data; it is
	// emptied before and after.
	ScratchDir string
	Etcdutl    string
	Expect     Expected
	Timeout    time.Duration
}

// Expected is what the snapshot agent recorded; zero values and nil
// pointers are unknown and not compared.
type Expected struct {
	Checksum        string // sha256:<hex>
	SizeBytes       int64
	Revision        int64
	KeyCount        *int64
	KVHash          *uint32
	CompactRevision int64
}

// VerifyConfigFromEnv reads the verification agent's settings.
func VerifyConfigFromEnv(get func(string) string) (VerifyConfig, error) {
	cfg := VerifyConfig{ScratchDir: get(agentenv.EnvScratchDir), Etcdutl: get(agentenv.EnvEtcdutl), Timeout: 30 * time.Minute}
	if cfg.Etcdutl == "" {
		cfg.Etcdutl = agentenv.DefaultEtcdutlPath
	}
	if cfg.ScratchDir == "" {
		return cfg, permanent(conditions.ReasonAgentMisconfigured, "%s must be set", agentenv.EnvScratchDir)
	}
	e := &cfg.Expect
	e.Checksum = get(agentenv.EnvExpectChecksum)
	var err error
	for _, f := range []struct {
		name string
		into *int64
		min  int64
	}{
		{agentenv.EnvExpectSize, &e.SizeBytes, 0}, {agentenv.EnvExpectRevision, &e.Revision, 0},
		// etcd says -1 for a store never compacted.
		{agentenv.EnvExpectCompactRevision, &e.CompactRevision, -1},
	} {
		if *f.into, err = optionalInt(get, f.name, f.min); err != nil {
			return cfg, err
		}
	}
	if v := get(agentenv.EnvExpectKeyCount); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return cfg, permanent(conditions.ReasonAgentMisconfigured, "%s=%q is not a count", agentenv.EnvExpectKeyCount, v)
		}
		e.KeyCount = &n
	}
	if v := get(agentenv.EnvExpectKVHash); v != "" {
		h, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return cfg, permanent(conditions.ReasonAgentMisconfigured, "%s=%q is not a 32-bit hash", agentenv.EnvExpectKVHash, v)
		}
		h32 := uint32(h)
		e.KVHash = &h32
	}
	if cfg.Source, err = locationFromEnv(get); err != nil {
		return cfg, err
	}
	return cfg, exactFile(cfg.Source)
}

func optionalInt(get func(string) string, name string, minimum int64) (int64, error) {
	v := get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < minimum {
		return 0, permanent(conditions.ReasonAgentMisconfigured, "%s=%q is not a number of at least %d", name, v, minimum)
	}
	return n, nil
}

// exactFile fails unless a location names one snapshot file, as the restore
// and the verification read.
func exactFile(l Location) error {
	switch {
	case l.Kind == agentenv.DestinationS3 && l.S3.Key == "":
		return permanent(conditions.ReasonAgentMisconfigured, "%s must name the snapshot object", agentenv.EnvS3Key)
	case l.Kind == agentenv.DestinationPVC && l.SubPath == "":
		return permanent(conditions.ReasonAgentMisconfigured, "%s must name the snapshot file", agentenv.EnvPVCSubPath)
	}
	return nil
}
