// Package agentenv names the environment the agents read: the contract
// between the Jobs and init containers the operator renders (package manifest)
// and the agents that run in them (package agent).
package agentenv

// Environment variables of the agents. The snapshot Job and the restore init
// containers set them (internal/manifest); the names follow the reference
// operator's where it has one.
const (
	EnvEndpoints    = "ETCD_ENDPOINTS"
	EnvCAFile       = "ETCD_TLS_CA_PATH"
	EnvCertFile     = "ETCD_TLS_CERT_PATH"
	EnvKeyFile      = "ETCD_TLS_KEY_PATH"
	EnvUsername     = "ETCD_USERNAME"
	EnvPassword     = "ETCD_PASSWORD"
	EnvSnapshotName = "SNAPSHOT_NAME"
	EnvSnapshotUID  = "SNAPSHOT_UID"
	EnvNamespace    = "SNAPSHOT_NAMESPACE"
	EnvCluster      = "ETCD_CLUSTER"
	EnvScheduleName = "SCHEDULE_NAME"
	EnvScheduleUID  = "SCHEDULE_UID"
	EnvKeepLast     = "RETENTION_KEEP_LAST"
	// EnvCompression is how the snapshot agent compresses the file it
	// stores: CompressionZstd, or nothing.
	EnvCompression  = "SNAPSHOT_COMPRESSION"
	CompressionZstd = "zstd"
	EnvMaxAge       = "RETENTION_MAX_AGE"

	EnvDestKind    = "SNAPSHOT_DEST_KIND"
	EnvS3Endpoint  = "S3_ENDPOINT"
	EnvS3Bucket    = "S3_BUCKET"
	EnvS3Key       = "S3_KEY"
	EnvS3Region    = "S3_REGION"
	EnvS3PathStyle = "S3_FORCE_PATH_STYLE"
	// EnvS3CABundle holds PEM certificates trusted for the endpoint besides
	// the public roots (a store whose CA is private).
	EnvS3CABundle = "S3_CA_BUNDLE"
	// The objects' storage class and server-side encryption: its type
	// (S3, KMS, Customer), the KMS key, and the customer's key (base64).
	EnvS3StorageClass   = "S3_STORAGE_CLASS"
	EnvS3SSEType        = "S3_SSE_TYPE"
	EnvS3SSEKMSKeyID    = "S3_SSE_KMS_KEY_ID"
	EnvS3SSECustomerKey = "S3_SSE_CUSTOMER_KEY"
	EnvAccessKey        = "AWS_ACCESS_KEY_ID"
	EnvSecretKey        = "AWS_SECRET_ACCESS_KEY"
	EnvSessionToken     = "AWS_SESSION_TOKEN"
	// The AWS SDKs' variables for a web identity: the token's file, the
	// role to assume, and the STS to trade the token at.
	EnvWebIdentityTokenFile = "AWS_WEB_IDENTITY_TOKEN_FILE"
	EnvRoleARN              = "AWS_ROLE_ARN"
	EnvSTSEndpoint          = "AWS_ENDPOINT_URL_STS"
	EnvPVCMountPath         = "PVC_MOUNT_PATH"
	EnvPVCSubPath           = "PVC_SUBPATH"
	EnvTerminationLog       = "TERMINATION_MESSAGE_PATH"

	EnvDataDir        = "ETCD_DATA_DIR"
	EnvMemberName     = "ETCD_MEMBER_NAME"
	EnvInitialCluster = "ETCD_INITIAL_CLUSTER"
	EnvClusterToken   = "ETCD_INITIAL_CLUSTER_TOKEN"
	EnvPeerURL        = "ETCD_PEER_URLS"
	EnvClusterState   = "ETCD_INITIAL_CLUSTER_STATE"
	EnvTargetVersion  = "ETCD_VERSION"
	EnvEtcdutl        = "ETCDUTL_PATH"
	EnvToolsDir       = "TOOLS_DEST_DIR"
	// The verification agent's: its scratch directory, and what the
	// snapshot agent recorded, to compare with.
	EnvScratchDir            = "VERIFY_SCRATCH_DIR"
	EnvExpectChecksum        = "EXPECT_CHECKSUM"
	EnvExpectSize            = "EXPECT_SIZE_BYTES"
	EnvExpectRevision        = "EXPECT_REVISION"
	EnvExpectKeyCount        = "EXPECT_KEY_COUNT"
	EnvExpectKVHash          = "EXPECT_KV_HASH"
	EnvExpectCompactRevision = "EXPECT_COMPACT_REVISION"
	DestinationS3            = "s3"
	DestinationPVC           = "pvc"
	DefaultEtcdutlPath       = "/usr/local/bin/etcdutl"
	// ToolName is the file install-tools copies the operator binary to.
	ToolName = "etcd-operator"
)
