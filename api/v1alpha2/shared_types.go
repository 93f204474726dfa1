package v1alpha2

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// StorageMedium selects where a member keeps its data directory.
// +kubebuilder:validation:Enum="";Memory
type StorageMedium string

const (
	// StorageMediumDefault keeps the data directory on a PersistentVolumeClaim.
	StorageMediumDefault StorageMedium = ""
	// StorageMediumMemory keeps the data directory on a tmpfs emptyDir. A lost Pod
	// means a lost member, which the operator replaces with a fresh identity.
	StorageMediumMemory StorageMedium = "Memory"
)

// StorageSpec describes the data directory of every member.
type StorageSpec struct {
	// Size is the PVC request, or the tmpfs sizeLimit when medium is Memory.
	// It may grow but never shrink.
	// +kubebuilder:default="1Gi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity(string(oldSelf))) >= 0",message="storage.size cannot shrink: set it to the current size or larger"
	// +optional
	Size resource.Quantity `json:"size,omitempty"`

	// Medium is "" for a PersistentVolumeClaim or "Memory" for tmpfs. Immutable.
	// +kubebuilder:default=""
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="storage.medium is immutable: create a new cluster to change where data lives"
	// +optional
	Medium StorageMedium `json:"medium,omitempty"`

	// StorageClassName of the member PVCs. Unset uses the default StorageClass;
	// "" disables dynamic provisioning. Ignored when medium is Memory. Cannot be
	// added, removed or changed after creation.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// AdditionalMetadata is merged onto the objects the operator creates. Keys the
// operator sets itself win, and keys under the etcd-operator.cozystack.io/ prefix
// are dropped.
type AdditionalMetadata struct {
	// Labels to add.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations to add.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// AutoCompactionMode is etcd's --auto-compaction-mode.
// +kubebuilder:validation:Enum=periodic;revision
type AutoCompactionMode string

const (
	// AutoCompactionPeriodic compacts by time.
	AutoCompactionPeriodic AutoCompactionMode = "periodic"
	// AutoCompactionRevision compacts by revision count.
	AutoCompactionRevision AutoCompactionMode = "revision"
)

// EtcdOptions is the closed, typed set of etcd flags a user may set.
//
// +kubebuilder:validation:XValidation:rule="(has(self.electionTimeout) ? self.electionTimeout : 1000) >= 5 * (has(self.heartbeatInterval) ? self.heartbeatInterval : 100)",message="options.electionTimeout must be at least 5 times options.heartbeatInterval (etcd's defaults: 1000 and 100 milliseconds); etcd refuses to start otherwise"
type EtcdOptions struct {
	// QuotaBackendBytes is --quota-backend-bytes.
	// +kubebuilder:validation:Minimum=0
	// +optional
	QuotaBackendBytes *int64 `json:"quotaBackendBytes,omitempty"`

	// AutoCompactionMode is --auto-compaction-mode.
	// +optional
	AutoCompactionMode AutoCompactionMode `json:"autoCompactionMode,omitempty"`

	// AutoCompactionRetention is --auto-compaction-retention: a duration such as
	// "1h" or "30m", or a plain number (hours in periodic mode, revisions in
	// revision mode).
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$|^[0-9]+$`
	// +optional
	AutoCompactionRetention string `json:"autoCompactionRetention,omitempty"`

	// SnapshotCount is --snapshot-count.
	// +kubebuilder:validation:Minimum=1
	// +optional
	SnapshotCount *int64 `json:"snapshotCount,omitempty"`

	// HeartbeatInterval is --heartbeat-interval, in milliseconds (etcd's
	// default 100): raise it towards the round trip between members when
	// they are far apart.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	HeartbeatInterval *int32 `json:"heartbeatInterval,omitempty"`

	// ElectionTimeout is --election-timeout, in milliseconds (etcd's
	// default 1000): at least five heartbeat intervals, at most 50000.
	// +kubebuilder:validation:Minimum=5
	// +kubebuilder:validation:Maximum=50000
	// +optional
	ElectionTimeout *int32 `json:"electionTimeout,omitempty"`
}

// SnapshotLocation is where a snapshot is written to or restored from: exactly
// one of s3 or pvc.
// +kubebuilder:validation:XValidation:rule="has(self.s3) != has(self.pvc)",message="set exactly one of s3 or pvc"
type SnapshotLocation struct {
	// S3 is an S3-compatible object store.
	// +optional
	S3 *S3Location `json:"s3,omitempty"`
	// PVC is a PersistentVolumeClaim in the same namespace.
	// +optional
	PVC *PVCLocation `json:"pvc,omitempty"`
}

// S3Location addresses an object, or a key prefix, in an S3-compatible store.
// +kubebuilder:validation:XValidation:rule="!has(self.webIdentity) || !has(self.credentialsSecretRef) || !has(self.credentialsSecretRef.name) || size(self.credentialsSecretRef.name) == 0",message="set at most one of webIdentity and credentialsSecretRef: a web identity is traded for credentials at the STS, so there are no keys to read"
// +kubebuilder:validation:XValidation:rule="!has(self.sse) || self.sse.type != 'Customer' || self.endpoint.startsWith('https://')",message="sse.type Customer needs an https:// endpoint: the key goes with every request, and stores refuse it over plain HTTP"
type S3Location struct {
	// Endpoint URL of the store, for example https://s3.example.com.
	// +kubebuilder:validation:MinLength=1
	Endpoint string `json:"endpoint"`
	// Bucket name.
	// +kubebuilder:validation:MinLength=1
	Bucket string `json:"bucket"`
	// Key is a prefix when writing a snapshot, and the exact object key when
	// restoring one.
	// +optional
	Key string `json:"key,omitempty"`
	// CredentialsSecretRef names a Secret with the keys AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY. Without it the agents find credentials the way
	// the AWS SDKs do: their environment, a web identity token file (EKS
	// IRSA and other workload identities), the container credentials
	// endpoint (EKS Pod Identity, ECS), or the instance metadata service.
	// +optional
	CredentialsSecretRef corev1.LocalObjectReference `json:"credentialsSecretRef,omitempty"`
	// WebIdentity has the agents trade a token of their Pod's ServiceAccount
	// for the store's credentials at an STS (AssumeRoleWithWebIdentity). The
	// operator projects the token into the agents' Pods itself, for the
	// audience given, so no identity webhook is needed: for a store that
	// trusts the cluster's ServiceAccount issuer (AWS IAM with an OpenID
	// Connect provider for the cluster, MinIO with the API server as its
	// OpenID provider). The ServiceAccount is the snapshot's
	// serviceAccountName for snapshots and their verification, the members'
	// for a restore at bootstrap.
	// +optional
	WebIdentity *S3WebIdentity `json:"webIdentity,omitempty"`
	// CASecretRef names a Secret whose key ca.crt holds the PEM certificate
	// of the CA that signed the endpoint's certificate, for a store whose CA
	// is private; the public roots stay trusted too. Needs an https://
	// endpoint.
	// +optional
	CASecretRef *corev1.LocalObjectReference `json:"caSecretRef,omitempty"`
	// Region of the bucket; us-east-1 when unset.
	// +optional
	Region string `json:"region,omitempty"`
	// ForcePathStyle addresses the bucket in the URL path instead of the host
	// name (MinIO, Ceph RGW).
	// +optional
	ForcePathStyle bool `json:"forcePathStyle,omitempty"`
	// StorageClass the snapshots are stored with, as the store names it
	// (STANDARD_IA, INTELLIGENT_TIERING, GLACIER_IR on AWS; STANDARD or
	// REDUCED_REDUNDANCY on MinIO); the bucket's default when unset. A class
	// whose objects cannot be read at once (GLACIER, DEEP_ARCHIVE) cannot
	// be verified or restored from until they are brought back.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Z0-9_]*$`
	// +kubebuilder:validation:MaxLength=64
	StorageClass string `json:"storageClass,omitempty"`
	// SSE has the store encrypt the snapshots it keeps (server-side
	// encryption). Reading needs nothing more but for type Customer, whose
	// key every read and write carries: give a restore or a verification
	// the same sse as the snapshot's.
	// +optional
	SSE *S3Encryption `json:"sse,omitempty"`
}

// S3Encryption is the server-side encryption of the objects written.
// +kubebuilder:validation:XValidation:rule="self.type == 'KMS' || !has(self.kmsKeyID)",message="sse.kmsKeyID is for type KMS only"
// +kubebuilder:validation:XValidation:rule="(self.type == 'Customer') == has(self.customerKeySecretRef)",message="sse.customerKeySecretRef is required for type Customer, and only for it"
type S3Encryption struct {
	// Type is S3 (keys the store manages: SSE-S3), KMS (a key of the
	// store's key management service: SSE-KMS) or Customer (a key of
	// yours sent with every request: SSE-C; the store keeps no copy, and
	// snapshots whose key is lost cannot be read by anyone).
	// +kubebuilder:validation:Enum=S3;KMS;Customer
	Type string `json:"type"`
	// KMSKeyID is the KMS key's ID or ARN (type KMS); the store's default
	// key when unset.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	KMSKeyID string `json:"kmsKeyID,omitempty"`
	// CustomerKeySecretRef names a Secret whose key "key" holds the 256-bit
	// key, base64-encoded (type Customer): head -c 32 /dev/urandom | base64.
	// +optional
	CustomerKeySecretRef *corev1.LocalObjectReference `json:"customerKeySecretRef,omitempty"`
}

// S3 server-side encryption types.
const (
	SSETypeS3       = "S3"
	SSETypeKMS      = "KMS"
	SSETypeCustomer = "Customer"
	// SSECustomerKeyKey is the key of the Customer type's Secret that holds
	// the encryption key.
	SSECustomerKeyKey = "key"
)

// S3WebIdentity is how the agents' ServiceAccount token is traded for the
// store's credentials.
type S3WebIdentity struct {
	// Audience the projected token is issued for: what the STS expects in
	// its aud claim (sts.amazonaws.com for AWS; the client ID of MinIO's
	// OpenID provider).
	// +kubebuilder:validation:MinLength=1
	Audience string `json:"audience"`
	// RoleARN is the role to assume. AWS requires one; MinIO takes the role
	// of its OpenID provider's role policy, or none when its policy comes
	// from a claim.
	// +optional
	RoleARN string `json:"roleARN,omitempty"`
	// STSEndpoint is the STS the token is traded at, for example the
	// store's own endpoint for MinIO; AWS's STS when unset. It is trusted
	// as the store is (caSecretRef).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://')",message="webIdentity.stsEndpoint must be an http:// or https:// URL"
	STSEndpoint string `json:"stsEndpoint,omitempty"`
}

// PVCLocation addresses a directory, or a file, on a PersistentVolumeClaim.
type PVCLocation struct {
	// ClaimName of the PVC in the same namespace.
	// +kubebuilder:validation:MinLength=1
	ClaimName string `json:"claimName"`
	// SubPath is a subdirectory when writing a snapshot, and the exact file path
	// when restoring one.
	// +optional
	SubPath string `json:"subPath,omitempty"`
}

// PodSettings are the settings of member Pods that an EtcdCluster's spec
// sets, its status latches as the target, and each EtcdMember carries: the
// operator rolls a change of any of them out, one member at a time. Embedded
// inline, so the fields sit directly under spec (and status.observed).
type PodSettings struct {
	// Resources of the etcd container. When empty, requests of 100m CPU and
	// 128Mi memory are used.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// AdditionalMetadata is merged onto the objects the operator creates
	// (on a member: its Pod and PVC).
	// +optional
	AdditionalMetadata *AdditionalMetadata `json:"additionalMetadata,omitempty"`

	// Affinity of member Pods.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// TopologySpreadConstraints of member Pods.
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// Options are typed etcd flags.
	// +optional
	Options *EtcdOptions `json:"options,omitempty"`

	// ImagePullSecrets of member Pods.
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// Tolerations of member Pods: to run etcd on tainted nodes (control
	// plane, dedicated).
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// NodeSelector of member Pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// PriorityClassName of member Pods, to keep them from being preempted.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// RuntimeClassName of member Pods.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`

	// SchedulerName of member Pods; the default scheduler when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SchedulerName string `json:"schedulerName,omitempty"`

	// ExtraArgs are etcd flags the typed options do not cover, by name
	// without the leading dashes ("experimental-initial-corrupt-check":
	// "true"), passed as --name=value after the operator's own. Flags the
	// operator sets (identity, URLs, data directory, TLS, auth, the typed
	// options) are refused.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z0-9][a-z0-9.-]*$') && size(k) <= 64)",message="extraArgs: a key is an etcd flag name without leading dashes, such as experimental-initial-corrupt-check"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k in ['name','data-dir','wal-dir','listen-peer-urls','listen-client-urls','advertise-client-urls','initial-advertise-peer-urls','initial-cluster','initial-cluster-token','initial-cluster-state','listen-metrics-urls','force-new-cluster','config-file','discovery','discovery-srv','discovery-token','discovery-endpoints','cert-file','key-file','client-cert-auth','trusted-ca-file','auto-tls','client-crl-file','peer-cert-file','peer-key-file','peer-client-cert-auth','peer-trusted-ca-file','peer-auto-tls','peer-cert-allowed-hostname','peer-cert-allowed-cn','peer-crl-file','auth-token','quota-backend-bytes','auto-compaction-mode','auto-compaction-retention','snapshot-count','heartbeat-interval','election-timeout']))",messageExpression="'extraArgs: the operator sets --' + self.filter(k, k in ['name','data-dir','wal-dir','listen-peer-urls','listen-client-urls','advertise-client-urls','initial-advertise-peer-urls','initial-cluster','initial-cluster-token','initial-cluster-state','listen-metrics-urls','force-new-cluster','config-file','discovery','discovery-srv','discovery-token','discovery-endpoints','cert-file','key-file','client-cert-auth','trusted-ca-file','auto-tls','client-crl-file','peer-cert-file','peer-key-file','peer-client-cert-auth','peer-trusted-ca-file','peer-auto-tls','peer-cert-allowed-hostname','peer-cert-allowed-cn','peer-crl-file','auth-token','quota-backend-bytes','auto-compaction-mode','auto-compaction-retention','snapshot-count','heartbeat-interval','election-timeout'])[0] + ' itself; use the typed field for it if there is one (options, tls, storage), or leave it out'"
	ExtraArgs map[string]string `json:"extraArgs,omitempty"`

	// Env are environment variables of the etcd container, such as
	// GOMAXPROCS or GOMEMLIMIT. Variables named ETCD_* are refused: etcd
	// reads them as flags, which extraArgs sets.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(e, !e.name.startsWith('ETCD_'))",message="env: variables named ETCD_* are etcd's flags: set them with extraArgs (the operator refuses the ones it sets itself)"
	Env []corev1.EnvVar `json:"env,omitempty"`
}
