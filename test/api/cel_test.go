package api

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// celCase is one manifest sent to the API server. With update set, spec is
// created first (and must be accepted), then replaced by update; the verdict
// applies to that second request. reject is a part of the expected message;
// empty means the request must be accepted.
type celCase struct {
	name   string
	kind   string
	spec   string
	update string
	reject string
}

const (
	cluster  = "EtcdCluster"
	member   = "EtcdMember"
	snapshot = "EtcdSnapshot"
	defrag   = "EtcdDefrag"
	schedule = "EtcdSnapshotSchedule"
	policy   = "EtcdDefragPolicy"
)

// Specs shared by several cases.
const (
	minimal   = "version: 3.6.16"
	withTLS   = "version: 3.6.16\ntls: {client: {serverSecretRef: {name: srv}}, peer: {secretRef: {name: peer}}}"
	withAuth  = withTLS + "\nauth: {enabled: true, rootCredentialsSecretRef: {name: root}}"
	withClass = "version: 3.6.16\nstorage: {size: 1Gi, storageClassName: fast}"
	memory    = "version: 3.6.16\nstorage: {medium: Memory, size: 64Mi}"
	restoreS3 = "version: 3.6.16\nbootstrap: {restore: {source: {s3: {endpoint: 'https://s3', bucket: b, key: k.db, credentialsSecretRef: {name: c}}}}}"
	memberMin = "clusterName: c\nversion: 3.6.16\nstorage: {size: 1Gi}\ninitialCluster: ''\nclusterToken: t"
	snapS3    = "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'https://s3', bucket: b, credentialsSecretRef: {name: c}}}"
	snapPVC   = "clusterRef: {name: c}\ndestination: {pvc: {claimName: backups}}"
	schedMin  = "schedule: '0 * * * *'\nsnapshotTemplate: {spec: {clusterRef: {name: c}, destination: {pvc: {claimName: backups}}}}"
	policyMin = "clusterRef: {name: c}\nschedule: '0 3 * * *'"
)

// The numbers in case names refer to the list of CEL rules on EtcdCluster in
// the reference (docs/api.md repeats it).
var celCases = []celCase{
	// Schema basics.
	{name: "minimal cluster", kind: cluster, spec: minimal},
	{name: "version is required", kind: cluster, spec: "replicas: 1", reject: "spec.version: Required value"},
	{name: "version must be X.Y.Z", kind: cluster, spec: "version: v3.6", reject: "spec.version in body should match"},
	{name: "replicas cannot be negative", kind: cluster, spec: "version: 3.6.16\nreplicas: -1", reject: "spec.replicas in body should be greater than or equal to 0"},
	{name: "progress deadline at least 1s", kind: cluster, spec: "version: 3.6.16\nprogressDeadlineSeconds: 0", reject: "spec.progressDeadlineSeconds in body should be greater than or equal to 1"},
	{name: "medium enum", kind: cluster, spec: "version: 3.6.16\nstorage: {medium: Disk}", reject: `supported values: "", "Memory"`},
	{name: "compaction mode enum", kind: cluster, spec: "version: 3.6.16\noptions: {autoCompactionMode: hourly}", reject: `supported values: "periodic", "revision"`},
	{name: "compaction retention duration", kind: cluster, spec: "version: 3.6.16\noptions: {autoCompactionRetention: 1h30m}"},
	{name: "compaction retention number", kind: cluster, spec: "version: 3.6.16\noptions: {autoCompactionRetention: '72'}"},
	{name: "compaction retention garbage", kind: cluster, spec: "version: 3.6.16\noptions: {autoCompactionRetention: 1 day}", reject: "spec.options.autoCompactionRetention in body should match"},
	{name: "quota not negative", kind: cluster, spec: "version: 3.6.16\noptions: {quotaBackendBytes: -1}", reject: "spec.options.quotaBackendBytes in body should be greater than or equal to 0"},
	{name: "snapshot count at least 1", kind: cluster, spec: "version: 3.6.16\noptions: {snapshotCount: 0}", reject: "spec.options.snapshotCount in body should be greater than or equal to 1"},
	{name: "issuer kind enum", kind: cluster, spec: "version: 3.6.16\ntls: {peer: {certManager: {issuerRef: {name: ca, kind: Vault}}}}", reject: `supported values: "Issuer", "ClusterIssuer"`},
	{name: "issuer name not empty", kind: cluster, spec: "version: 3.6.16\ntls: {peer: {certManager: {issuerRef: {name: ''}}}}", reject: "spec.tls.peer.certManager.issuerRef.name in body should be at least 1 chars long"},

	// 1: pause is not possible on tmpfs.
	{name: "1 replicas 0 with Memory", kind: cluster, spec: "version: 3.6.16\nreplicas: 0\nstorage: {medium: Memory, size: 64Mi}", reject: "replicas: 0 (pause) is not supported with storage.medium: Memory"},
	{name: "1 replicas 0 on PVC", kind: cluster, spec: "version: 3.6.16\nreplicas: 0"},
	{name: "1 replicas 1 on Memory", kind: cluster, spec: "version: 3.6.16\nreplicas: 1\nstorage: {medium: Memory, size: 64Mi}"},
	{name: "1 scale a Memory cluster to 0", kind: cluster, spec: memory, update: "version: 3.6.16\nreplicas: 0\nstorage: {medium: Memory, size: 64Mi}", reject: "replicas: 0 (pause) is not supported"},
	// 2: tmpfs needs a size.
	{name: "2 Memory with size 0", kind: cluster, spec: "version: 3.6.16\nstorage: {medium: Memory, size: '0'}", reject: "storage.size must be greater than zero when storage.medium is Memory"},
	{name: "2 Memory with integer size 0", kind: cluster, spec: "version: 3.6.16\nstorage: {medium: Memory, size: 0}", reject: "storage.size must be greater than zero"},
	{name: "2 Memory with integer size", kind: cluster, spec: "version: 3.6.16\nstorage: {medium: Memory, size: 67108864}"},
	{name: "2 Memory with default size", kind: cluster, spec: "version: 3.6.16\nstorage: {medium: Memory}"},
	{name: "2 PVC with size 0 is the reference's business", kind: cluster, spec: "version: 3.6.16\nstorage: {size: '0'}"},
	// 3, 4: tls is fixed at creation.
	{name: "3 add tls", kind: cluster, spec: minimal, update: withTLS, reject: "tls cannot be added or removed after creation"},
	{name: "3 remove tls", kind: cluster, spec: withTLS, update: minimal, reject: "tls cannot be added or removed after creation"},
	{name: "4 change tls", kind: cluster, spec: withTLS, update: strings.Replace(withTLS, "srv", "srv2", 1), reject: "spec.tls.client is immutable"},
	// 4b: the one change allowed, own Secrets to cert-manager per plane,
	// keeping the client plane's mutual TLS as it was.
	{name: "4b hand both planes over", kind: cluster, spec: withTLS,
		update: "version: 3.6.16\ntls: {client: {certManager: {serverIssuerRef: {name: ca}}}, peer: {certManager: {issuerRef: {name: ca}}}}"},
	{name: "4b hand the peer plane over", kind: cluster, spec: withTLS,
		update: "version: 3.6.16\ntls: {client: {serverSecretRef: {name: srv}}, peer: {certManager: {issuerRef: {name: ca}}}}"},
	{name: "4b hand over keeping mTLS", kind: cluster, spec: "version: 3.6.16\ntls: {client: {serverSecretRef: {name: srv}, operatorClientSecretRef: {name: op}}}",
		update: "version: 3.6.16\ntls: {client: {certManager: {serverIssuerRef: {name: ca}, operatorClientIssuerRef: {name: ca}}}}"},
	{name: "4b hand over dropping mTLS", kind: cluster, spec: "version: 3.6.16\ntls: {client: {serverSecretRef: {name: srv}, operatorClientSecretRef: {name: op}}}",
		update: "version: 3.6.16\ntls: {client: {certManager: {serverIssuerRef: {name: ca}}}}", reject: "mTLS posture"},
	{name: "4b hand over adding mTLS", kind: cluster, spec: withTLS,
		update: "version: 3.6.16\ntls: {client: {certManager: {serverIssuerRef: {name: ca}, operatorClientIssuerRef: {name: ca}}}, peer: {secretRef: {name: peer}}}", reject: "mTLS posture"},
	{name: "4b back from cert-manager", kind: cluster, spec: "version: 3.6.16\ntls: {peer: {certManager: {issuerRef: {name: ca}}}}",
		update: "version: 3.6.16\ntls: {peer: {secretRef: {name: peer}}}", reject: "spec.tls.peer is immutable"},
	{name: "4b another issuer", kind: cluster, spec: "version: 3.6.16\ntls: {peer: {certManager: {issuerRef: {name: ca}}}}",
		update: "version: 3.6.16\ntls: {peer: {certManager: {issuerRef: {name: ca2}}}}", reject: "spec.tls.peer is immutable"},
	{name: "4b add the peer plane", kind: cluster, spec: "version: 3.6.16\ntls: {client: {serverSecretRef: {name: srv}}}",
		update: withTLS, reject: "tls.peer cannot be added or removed"},
	{name: "4b remove the client plane", kind: cluster, spec: withTLS,
		update: "version: 3.6.16\ntls: {peer: {secretRef: {name: peer}}}", reject: "tls.client cannot be added or removed"},
	{name: "4b both sources at once", kind: cluster, spec: withTLS,
		update: "version: 3.6.16\ntls: {client: {serverSecretRef: {name: srv}, certManager: {serverIssuerRef: {name: ca}}}, peer: {secretRef: {name: peer}}}", reject: "set exactly one of serverSecretRef or certManager"},
	{name: "4 keep tls, change replicas", kind: cluster, spec: withTLS, update: withTLS + "\nreplicas: 5"},
	// 5, 6: storage class is fixed at creation.
	{name: "5 add storage class", kind: cluster, spec: minimal, update: withClass, reject: "storage.storageClassName cannot be added or removed after creation"},
	{name: "5 remove storage class", kind: cluster, spec: withClass, update: "version: 3.6.16\nstorage: {size: 1Gi}", reject: "storage.storageClassName cannot be added or removed after creation"},
	{name: "6 change storage class", kind: cluster, spec: withClass, update: strings.Replace(withClass, "fast", "slow", 1), reject: "storage.storageClassName is immutable after creation"},
	// 7, 8: auth is fixed at creation.
	{name: "7 add auth", kind: cluster, spec: withTLS, update: withAuth, reject: v1alpha2.MsgAuthAddRemove},
	{name: "7 remove auth", kind: cluster, spec: withAuth, update: withTLS, reject: v1alpha2.MsgAuthAddRemove},
	{name: "8 change auth", kind: cluster, spec: withAuth, update: strings.Replace(withAuth, "name: root", "name: root2", 1), reject: v1alpha2.MsgAuthImmutable},
	// 9, 10: auth prerequisites.
	{name: "9 auth without client tls", kind: cluster, spec: "version: 3.6.16\nauth: {enabled: true, rootCredentialsSecretRef: {name: root}}", reject: v1alpha2.MsgAuthRequiresClientTLS},
	{name: "9 auth with peer tls only", kind: cluster, spec: "version: 3.6.16\ntls: {peer: {secretRef: {name: p}}}\nauth: {enabled: true, rootCredentialsSecretRef: {name: root}}", reject: v1alpha2.MsgAuthRequiresClientTLS},
	{name: "10 auth without credentials", kind: cluster, spec: withTLS + "\nauth: {enabled: true}", reject: v1alpha2.MsgAuthRequiresCredentialsRef},
	{name: "9 10 auth disabled needs neither", kind: cluster, spec: "version: 3.6.16\nauth: {enabled: false}"},
	{name: "9 10 auth complete", kind: cluster, spec: withAuth},
	// 11, 12: bootstrap is fixed at creation.
	{name: "11 add bootstrap", kind: cluster, spec: minimal, update: restoreS3, reject: "bootstrap cannot be added or removed after creation"},
	{name: "11 remove bootstrap", kind: cluster, spec: restoreS3, update: minimal, reject: "bootstrap cannot be added or removed after creation"},
	{name: "12 change bootstrap", kind: cluster, spec: restoreS3, update: strings.Replace(restoreS3, "k.db", "other.db", 1), reject: "bootstrap is immutable after creation"},
	// 13: no restore on tmpfs.
	{name: "13 restore on Memory", kind: cluster, spec: restoreS3 + "\nstorage: {medium: Memory, size: 64Mi}", reject: "bootstrap.restore is not supported with storage.medium: Memory"},
	// 14: storage grows only.
	{name: "14 shrink storage", kind: cluster, spec: "version: 3.6.16\nstorage: {size: 2Gi}", update: "version: 3.6.16\nstorage: {size: 1Gi}", reject: "storage.size cannot shrink"},
	{name: "14 grow storage", kind: cluster, spec: "version: 3.6.16\nstorage: {size: 1Gi}", update: "version: 3.6.16\nstorage: {size: 2Gi}"},
	{name: "14 same size, other spelling", kind: cluster, spec: "version: 3.6.16\nstorage: {size: 1Gi}", update: "version: 3.6.16\nstorage: {size: 1073741824}"},
	{name: "14 shrink integer storage", kind: cluster, spec: "version: 3.6.16\nstorage: {size: 2147483648}", update: "version: 3.6.16\nstorage: {size: 1Gi}", reject: "storage.size cannot shrink"},
	// 15: medium is immutable.
	{name: "15 PVC to Memory", kind: cluster, spec: minimal, update: memory, reject: "storage.medium is immutable"},
	{name: "15 Memory to PVC", kind: cluster, spec: memory, update: "version: 3.6.16\nstorage: {size: 64Mi, medium: ''}", reject: "storage.medium is immutable"},
	// 16, 17: client TLS source.
	{name: "16 client tls with both sources", kind: cluster, spec: "version: 3.6.16\ntls: {client: {serverSecretRef: {name: s}, certManager: {serverIssuerRef: {name: ca}}}}", reject: "tls.client: set exactly one of serverSecretRef or certManager"},
	{name: "16 client tls with no source", kind: cluster, spec: "version: 3.6.16\ntls: {client: {operatorClientSecretRef: {name: c}}}", reject: "tls.client: set exactly one of serverSecretRef or certManager"},
	{name: "16 client tls by cert-manager", kind: cluster, spec: "version: 3.6.16\ntls: {client: {certManager: {serverIssuerRef: {name: ca}}}}"},
	{name: "17 own client cert with cert-manager", kind: cluster, spec: "version: 3.6.16\ntls: {client: {operatorClientSecretRef: {name: c}, certManager: {serverIssuerRef: {name: ca}}}}", reject: "operatorClientSecretRef cannot be combined with certManager"},
	{name: "17 own server and client certs", kind: cluster, spec: "version: 3.6.16\ntls: {client: {serverSecretRef: {name: s}, operatorClientSecretRef: {name: c}}}"},
	// 18: peer TLS source.
	{name: "18 peer tls with both sources", kind: cluster, spec: "version: 3.6.16\ntls: {peer: {secretRef: {name: p}, certManager: {issuerRef: {name: ca}}}}", reject: "tls.peer: set exactly one of secretRef or certManager"},
	{name: "18 peer tls with no source", kind: cluster, spec: "version: 3.6.16\ntls: {peer: {}}", reject: "tls.peer: set exactly one of secretRef or certManager"},
	// 18b: one kind of peer identity, or none.
	{name: "18b peer identity of both kinds", kind: cluster, spec: "version: 3.6.16\ntls: {peer: {secretRef: {name: p}, allowedHostnames: [a], allowedCommonNames: [b]}}", reject: "tls.peer: set at most one of allowedHostnames or allowedCommonNames"},
	{name: "18b peer identity by hostname", kind: cluster, spec: "version: 3.6.16\ntls: {peer: {certManager: {issuerRef: {name: ca}}, allowedHostnames: [peer.c.ns.svc]}}"},
	{name: "18b peer identity by common name", kind: cluster, spec: "version: 3.6.16\ntls: {peer: {secretRef: {name: p}, allowedCommonNames: [etcd-peer]}}"},
	{name: "18b empty peer identity", kind: cluster, spec: "version: 3.6.16\ntls: {peer: {secretRef: {name: p}, allowedHostnames: []}}", reject: "spec.tls.peer.allowedHostnames in body should have at least 1 items"},
	{name: "18b peer identity is immutable", kind: cluster, spec: "version: 3.6.16\ntls: {peer: {secretRef: {name: p}, allowedCommonNames: [a]}}",
		update: "version: 3.6.16\ntls: {peer: {secretRef: {name: p}, allowedCommonNames: [b]}}", reject: "spec.tls.peer is immutable"},
	// 22: timing options as etcd requires them.
	{name: "22 election five heartbeats", kind: cluster, spec: "version: 3.6.16\noptions: {heartbeatInterval: 200, electionTimeout: 1000}"},
	{name: "22 election under five heartbeats", kind: cluster, spec: "version: 3.6.16\noptions: {heartbeatInterval: 300, electionTimeout: 1000}", reject: "options.electionTimeout must be at least 5 times options.heartbeatInterval"},
	{name: "22 heartbeat alone against the default election", kind: cluster, spec: "version: 3.6.16\noptions: {heartbeatInterval: 250}", reject: "options.electionTimeout must be at least 5 times"},
	{name: "22 election alone against the default heartbeat", kind: cluster, spec: "version: 3.6.16\noptions: {electionTimeout: 400}", reject: "options.electionTimeout must be at least 5 times"},
	{name: "22 election over etcd's bound", kind: cluster, spec: "version: 3.6.16\noptions: {heartbeatInterval: 100, electionTimeout: 60000}", reject: "spec.options.electionTimeout: Invalid value: 60000: spec.options.electionTimeout in body should be less than or equal to 50000"},
	// 23: extraArgs and env keep off what the operator sets.
	{name: "23 an extra flag", kind: cluster, spec: "version: 3.6.16\nextraArgs: {max-txn-ops: '512', log-level: warn}\nenv: [{name: GOMAXPROCS, value: '2'}]"},
	{name: "23 an owned flag", kind: cluster, spec: "version: 3.6.16\nextraArgs: {log-level: warn, data-dir: /tmp}", reject: "extraArgs: the operator sets --data-dir itself"},
	{name: "23 a typed option as an extra flag", kind: cluster, spec: "version: 3.6.16\nextraArgs: {election-timeout: '5000'}", reject: "extraArgs: the operator sets --election-timeout itself"},
	{name: "23 a flag with dashes", kind: cluster, spec: "version: 3.6.16\nextraArgs: {--log-level: warn}", reject: "extraArgs: a key is an etcd flag name without leading dashes"},
	{name: "23 an etcd variable", kind: cluster, spec: "version: 3.6.16\nenv: [{name: ETCD_NAME, value: x}]", reject: "env: variables named ETCD_* are etcd's flags"},
	// 19: snapshot location one-of, on the cluster's restore source.
	{name: "19 restore from s3 and pvc", kind: cluster, spec: "version: 3.6.16\nbootstrap: {restore: {source: {s3: {endpoint: e, bucket: b, key: k, credentialsSecretRef: {name: c}}, pvc: {claimName: p, subPath: s}}}}", reject: "set exactly one of s3 or pvc"},
	{name: "19 restore from nowhere", kind: cluster, spec: "version: 3.6.16\nbootstrap: {restore: {source: {}}}", reject: "set exactly one of s3 or pvc"},
	// 20, 21: a restore names an exact snapshot.
	{name: "20 restore s3 without key", kind: cluster, spec: "version: 3.6.16\nbootstrap: {restore: {source: {s3: {endpoint: e, bucket: b, credentialsSecretRef: {name: c}}}}}", reject: "bootstrap.restore.source.s3.key must name the snapshot object"},
	{name: "20 restore s3 with empty key", kind: cluster, spec: "version: 3.6.16\nbootstrap: {restore: {source: {s3: {endpoint: e, bucket: b, key: '', credentialsSecretRef: {name: c}}}}}", reject: "bootstrap.restore.source.s3.key must name the snapshot object"},
	{name: "21 restore pvc without subPath", kind: cluster, spec: "version: 3.6.16\nbootstrap: {restore: {source: {pvc: {claimName: p}}}}", reject: "bootstrap.restore.source.pvc.subPath must name the snapshot file"},
	{name: "21 restore pvc with subPath", kind: cluster, spec: "version: 3.6.16\nbootstrap: {restore: {source: {pvc: {claimName: p, subPath: a/b.db}}}}"},

	// EtcdMember: the storage rules and the /scale-backing replicas.
	{name: "member minimal with pending initialCluster", kind: member, spec: memberMin},
	{name: "member needs a token", kind: member, spec: "clusterName: c\nversion: 3.6.16\nstorage: {size: 1Gi}\ninitialCluster: ''", reject: "spec.clusterToken: Required value"},
	{name: "member replicas locked to 1", kind: member, spec: memberMin + "\nreplicas: 2", reject: "spec.replicas in body should be less than or equal to 1"},
	{name: "member cluster name not empty", kind: member, spec: strings.Replace(memberMin, "clusterName: c", "clusterName: ''", 1), reject: "spec.clusterName in body should be at least 1 chars long"},
	{name: "member storage shrink", kind: member, spec: memberMin, update: strings.Replace(memberMin, "1Gi", "512Mi", 1), reject: "storage.size cannot shrink"},
	{name: "member storage medium change", kind: member, spec: memberMin, update: strings.Replace(memberMin, "{size: 1Gi}", "{size: 1Gi, medium: Memory}", 1), reject: "storage.medium is immutable"},
	{name: "member dormant toggles", kind: member, spec: memberMin, update: memberMin + "\ndormant: true"},
	// The member's identity in etcd cannot change.
	{name: "member cluster name is fixed", kind: member, spec: memberMin, update: strings.Replace(memberMin, "clusterName: c", "clusterName: d", 1), reject: "clusterName cannot change"},
	{name: "member service name set once", kind: member, spec: memberMin, update: memberMin + "\nserviceName: c"},
	{name: "member service name fixed once set", kind: member, spec: memberMin + "\nserviceName: c", update: memberMin + "\nserviceName: elsewhere", reject: "serviceName is part of the member's identity"},
	{name: "member service name not removed", kind: member, spec: memberMin + "\nserviceName: c", update: memberMin, reject: "serviceName is part of the member's identity"},
	{name: "member tls Secrets may change", kind: member, spec: memberMin + "\ntls: {peerSecretRef: {name: p}}",
		update: memberMin + "\ntls: {peerSecretRef: {name: q}, trustedCASecretRef: {name: t}, peerAllowedHostnames: [a]}"},
	{name: "member peer tls not turned off", kind: member, spec: memberMin + "\ntls: {peerSecretRef: {name: p}, clientServerSecretRef: {name: s}}",
		update: memberMin + "\ntls: {clientServerSecretRef: {name: s}}", reject: "tls on each plane is part of the member's identity"},
	{name: "member client tls not turned on", kind: member, spec: memberMin + "\ntls: {peerSecretRef: {name: p}}",
		update: memberMin + "\ntls: {peerSecretRef: {name: p}, clientServerSecretRef: {name: s}}", reject: "tls on each plane is part of the member's identity"},
	{name: "member peer auto tls to a Secret", kind: member, spec: memberMin + "\ntls: {peerAutoTLS: true}",
		update: memberMin + "\ntls: {peerSecretRef: {name: p}}"},
	{name: "member tls not added", kind: member, spec: memberMin, update: memberMin + "\ntls: {peerSecretRef: {name: p}}", reject: "tls on each plane is part of the member's identity"},
	{name: "member version may change (a roll-out)", kind: member, spec: memberMin, update: strings.Replace(memberMin, "3.6.16", "3.7.3", 1)},

	// EtcdSnapshot: destination one-of and required fields.
	{name: "snapshot to s3", kind: snapshot, spec: snapS3},
	{name: "snapshot to pvc", kind: snapshot, spec: snapPVC},
	{name: "snapshot to s3 by the credential chain, with a private CA", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'https://s3', bucket: b, caSecretRef: {name: ca}}}"},
	{name: "snapshot to s3 by a web identity", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'https://s3', bucket: b, webIdentity: {audience: sts.minio, roleARN: 'arn:minio:iam:::role/x', stsEndpoint: 'https://s3'}}}"},
	{name: "snapshot to s3 by a web identity and keys", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'https://s3', bucket: b, credentialsSecretRef: {name: c}, webIdentity: {audience: sts.minio}}}", reject: "set at most one of webIdentity and credentialsSecretRef"},
	{name: "snapshot to s3 by a web identity for no audience", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'https://s3', bucket: b, webIdentity: {audience: ''}}}", reject: "audience"},
	{name: "snapshot to s3 by a web identity at a bad STS", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'https://s3', bucket: b, webIdentity: {audience: a, stsEndpoint: 'minio:9000'}}}", reject: "webIdentity.stsEndpoint must be an http:// or https:// URL"},
	{name: "snapshot compressed", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {pvc: {claimName: b}}\ncompression: Zstd"},
	{name: "snapshot compressed some other way", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {pvc: {claimName: b}}\ncompression: gzip", reject: "Unsupported value"},
	{name: "snapshot encrypted by the store", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'http://s3', bucket: b, sse: {type: S3}, storageClass: STANDARD_IA}}"},
	{name: "snapshot encrypted with a KMS key", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'http://s3', bucket: b, sse: {type: KMS, kmsKeyID: 'arn:aws:kms:eu-west-1:1:key/k'}}}"},
	{name: "snapshot encrypted with a customer key", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'https://s3', bucket: b, sse: {type: Customer, customerKeySecretRef: {name: k}}}}"},
	{name: "snapshot encrypted with a customer key over http", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'http://s3', bucket: b, sse: {type: Customer, customerKeySecretRef: {name: k}}}}", reject: "sse.type Customer needs an https:// endpoint"},
	{name: "snapshot encrypted with a customer key it does not name", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'https://s3', bucket: b, sse: {type: Customer}}}", reject: "sse.customerKeySecretRef is required for type Customer"},
	{name: "snapshot encrypted by the store with a customer key", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'https://s3', bucket: b, sse: {type: S3, customerKeySecretRef: {name: k}}}}", reject: "sse.customerKeySecretRef is required for type Customer, and only for it"},
	{name: "snapshot encrypted by the store with a KMS key", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'https://s3', bucket: b, sse: {type: S3, kmsKeyID: k}}}", reject: "sse.kmsKeyID is for type KMS only"},
	{name: "snapshot encrypted some other way", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'https://s3', bucket: b, sse: {type: AES256}}}", reject: "Unsupported value"},
	{name: "snapshot in a storage class of no such shape", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {s3: {endpoint: 'https://s3', bucket: b, storageClass: 'standard ia'}}", reject: "storageClass"},
	{name: "restore of a snapshot encrypted with a customer key over http", kind: cluster, spec: "version: 3.6.16\nbootstrap: {restore: {source: {s3: {endpoint: 'http://e', bucket: b, key: k, sse: {type: Customer, customerKeySecretRef: {name: k}}}}}}", reject: "sse.type Customer needs an https:// endpoint"},
	{name: "snapshot before a version change to s3", kind: cluster, spec: "version: 3.6.16\nsnapshotBefore: {changes: [VersionChange, ScaleIn, Pause], destination: {s3: {endpoint: 'https://s3', bucket: b}}}"},
	{name: "snapshot before a scale-in from a schedule", kind: cluster, spec: "version: 3.6.16\nsnapshotBefore: {changes: [ScaleIn], scheduleRef: {name: nightly}}"},
	{name: "snapshot before with a schedule and a destination", kind: cluster, spec: "version: 3.6.16\nsnapshotBefore: {changes: [ScaleIn], scheduleRef: {name: nightly}, destination: {pvc: {claimName: c}}}", reject: "snapshotBefore needs exactly one of scheduleRef and destination"},
	{name: "snapshot before with nowhere to go", kind: cluster, spec: "version: 3.6.16\nsnapshotBefore: {changes: [ScaleIn]}", reject: "snapshotBefore needs exactly one of scheduleRef and destination"},
	{name: "snapshot before nothing", kind: cluster, spec: "version: 3.6.16\nsnapshotBefore: {changes: [], scheduleRef: {name: nightly}}", reject: "should have at least 1 items"},
	{name: "snapshot before an unknown change", kind: cluster, spec: "version: 3.6.16\nsnapshotBefore: {changes: [Upgrade], scheduleRef: {name: nightly}}", reject: "Unsupported value"},
	{name: "snapshot before a change named twice", kind: cluster, spec: "version: 3.6.16\nsnapshotBefore: {changes: [Pause, Pause], scheduleRef: {name: nightly}}", reject: "Duplicate value"},
	{name: "restore by a web identity and keys", kind: cluster, spec: "version: 3.6.16\nbootstrap: {restore: {source: {s3: {endpoint: e, bucket: b, key: k, credentialsSecretRef: {name: c}, webIdentity: {audience: a}}}}}", reject: "set at most one of webIdentity and credentialsSecretRef"},
	{name: "snapshot to s3 and pvc", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {pvc: {claimName: p}, s3: {endpoint: e, bucket: b, credentialsSecretRef: {name: c}}}", reject: "set exactly one of s3 or pvc"},
	{name: "snapshot to nowhere", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {}", reject: "set exactly one of s3 or pvc"},
	{name: "snapshot s3 empty bucket", kind: snapshot, spec: strings.Replace(snapS3, "bucket: b", "bucket: ''", 1), reject: "spec.destination.s3.bucket in body should be at least 1 chars long"},
	{name: "snapshot s3 empty endpoint", kind: snapshot, spec: strings.Replace(snapS3, "endpoint: 'https://s3'", "endpoint: ''", 1), reject: "spec.destination.s3.endpoint in body should be at least 1 chars long"},
	{name: "snapshot pvc empty claim", kind: snapshot, spec: "clusterRef: {name: c}\ndestination: {pvc: {claimName: ''}}", reject: "spec.destination.pvc.claimName in body should be at least 1 chars long"},
	{name: "snapshot needs a destination", kind: snapshot, spec: "clusterRef: {name: c}", reject: "spec.destination: Required value"},
	// EtcdSnapshot: the spec is immutable (what was asked is what ran).
	{name: "snapshot cluster is immutable", kind: snapshot, spec: snapS3, update: strings.Replace(snapS3, "{name: c}\ndest", "{name: other}\ndest", 1), reject: "spec is immutable; create a new EtcdSnapshot instead"},
	{name: "snapshot s3 key is immutable", kind: snapshot, spec: snapS3, update: strings.Replace(snapS3, "bucket: b,", "bucket: b, key: other.db,", 1), reject: "spec is immutable; create a new EtcdSnapshot instead"},
	{name: "snapshot pvc claim is immutable", kind: snapshot, spec: snapPVC, update: strings.Replace(snapPVC, "backups", "elsewhere", 1), reject: "spec is immutable; create a new EtcdSnapshot instead"},
	{name: "snapshot spec unchanged on update", kind: snapshot, spec: snapPVC, update: snapPVC},
	{name: "schedule template stays editable", kind: schedule, spec: schedMin, update: strings.Replace(schedMin, "backups", "elsewhere", 1)},
	// Verification is asked for at creation, like the rest of the spec.
	{name: "snapshot verify", kind: snapshot, spec: snapPVC + "\nverify: true"},
	{name: "snapshot verify is immutable", kind: snapshot, spec: snapPVC, update: snapPVC + "\nverify: true", reject: "spec is immutable; create a new EtcdSnapshot instead"},

	// EtcdSnapshotSchedule: a cron schedule, a time zone apart, retention.
	{name: "schedule minimal", kind: schedule, spec: schedMin},
	{name: "schedule macro", kind: schedule, spec: strings.Replace(schedMin, "'0 * * * *'", "'@daily'", 1)},
	{name: "schedule ranges and steps", kind: schedule, spec: strings.Replace(schedMin, "'0 * * * *'", "'*/15 2-4 * * 1-5'", 1)},
	{name: "schedule four fields", kind: schedule, spec: strings.Replace(schedMin, "'0 * * * *'", "'0 * * *'", 1), reject: "spec.schedule in body should match"},
	{name: "schedule words", kind: schedule, spec: strings.Replace(schedMin, "'0 * * * *'", "'every hour'", 1), reject: "spec.schedule in body should match"},
	{name: "schedule @every", kind: schedule, spec: strings.Replace(schedMin, "'0 * * * *'", "'@every 5m'", 1), reject: "spec.schedule in body should match"},
	{name: "schedule empty", kind: schedule, spec: strings.Replace(schedMin, "'0 * * * *'", "''", 1), reject: "spec.schedule in body should be at least 1 chars long"},
	{name: "schedule time zone inside", kind: schedule, spec: strings.Replace(schedMin, "'0 * * * *'", "'TZ=UTC 0 * * *'", 1), reject: "schedule cannot carry TZ= or CRON_TZ=: set spec.timeZone instead"},
	{name: "schedule time zone", kind: schedule, spec: schedMin + "\ntimeZone: Europe/Berlin"},
	{name: "schedule time zone with offset", kind: schedule, spec: schedMin + "\ntimeZone: Etc/GMT+3"},
	{name: "schedule time zone not a name", kind: schedule, spec: schedMin + "\ntimeZone: ../../etc/passwd", reject: "spec.timeZone in body should match"},
	{name: "schedule time zone empty", kind: schedule, spec: schedMin + "\ntimeZone: ''", reject: "spec.timeZone in body should be at least 1 chars long"},
	{name: "schedule retention by count and age", kind: schedule, spec: schedMin + "\nretention: {keepLast: 7, maxAge: 168h}"},
	{name: "schedule retention empty", kind: schedule, spec: schedMin + "\nretention: {}", reject: "retention: set keepLast, maxAge or both"},
	{name: "schedule retention keep none", kind: schedule, spec: schedMin + "\nretention: {keepLast: 0}", reject: "spec.retention.keepLast in body should be greater than or equal to 1"},
	{name: "schedule retention in days", kind: schedule, spec: schedMin + "\nretention: {maxAge: 7d}", reject: "spec.retention.maxAge in body should match"},
	{name: "schedule history negative", kind: schedule, spec: schedMin + "\nsuccessfulSnapshotsHistoryLimit: -1", reject: "spec.successfulSnapshotsHistoryLimit in body should be greater than or equal to 0"},
	{name: "schedule failed history negative", kind: schedule, spec: schedMin + "\nfailedSnapshotsHistoryLimit: -1", reject: "spec.failedSnapshotsHistoryLimit in body should be greater than or equal to 0"},
	{name: "schedule deadline negative", kind: schedule, spec: schedMin + "\nstartingDeadlineSeconds: -1", reject: "spec.startingDeadlineSeconds in body should be greater than or equal to 0"},
	{name: "schedule template to s3 and pvc", kind: schedule, spec: "schedule: '@hourly'\nsnapshotTemplate: {spec: {clusterRef: {name: c}, destination: {pvc: {claimName: p}, s3: {endpoint: e, bucket: b, credentialsSecretRef: {name: c}}}}}", reject: "set exactly one of s3 or pvc"},
	{name: "schedule needs a template", kind: schedule, spec: "schedule: '@hourly'", reject: "spec.snapshotTemplate: Required value"},
	{name: "schedule verifies every 7th", kind: schedule, spec: strings.Replace(schedMin, "clusterRef: {name: c},", "clusterRef: {name: c}, verify: true,", 1) + "\nverifyEvery: 7"},
	{name: "schedule verifyEvery zero", kind: schedule, spec: strings.Replace(schedMin, "clusterRef: {name: c},", "clusterRef: {name: c}, verify: true,", 1) + "\nverifyEvery: 0", reject: "verifyEvery must be 1 (verify every snapshot) or more (verify every Nth)"},
	{name: "schedule verifyEvery without verify", kind: schedule, spec: schedMin + "\nverifyEvery: 2", reject: "verifyEvery needs snapshotTemplate.spec.verify: true"},

	// EtcdDefrag: the rule set.
	{name: "defrag default gate", kind: defrag, spec: "clusterRef: {name: c}"},
	{name: "defrag empty cluster name", kind: defrag, spec: "clusterRef: {name: ''}", reject: "clusterRef.name must name the EtcdCluster to defragment"},
	{name: "defrag a: all alone", kind: defrag, spec: "clusterRef: {name: c}\nrule: {all: true}"},
	{name: "defrag a: all with freeSpaceAbove", kind: defrag, spec: "clusterRef: {name: c}\nrule: {all: true, freeSpaceAbove: 1Gi}", reject: "rule.all: true defragments every member and cannot be combined"},
	{name: "defrag a: all with quotaUsageAbove", kind: defrag, spec: "clusterRef: {name: c}\nrule: {all: true, quotaUsageAbove: 50%}", reject: "rule.all: true defragments every member and cannot be combined"},
	{name: "defrag a: all false with thresholds", kind: defrag, spec: "clusterRef: {name: c}\nrule: {all: false, freeSpaceAbove: 1Gi}"},
	{name: "defrag b: freeSpaceAbove zero", kind: defrag, spec: "clusterRef: {name: c}\nrule: {freeSpaceAbove: '0'}", reject: "rule.freeSpaceAbove must be greater than zero"},
	{name: "defrag c: minReclaim zero", kind: defrag, spec: "clusterRef: {name: c}\nrule: {quotaUsageAbove: 80%, minReclaim: 0}", reject: "rule.minReclaim must be greater than zero"},
	{name: "defrag d: minReclaim alone", kind: defrag, spec: "clusterRef: {name: c}\nrule: {minReclaim: 64Mi}", reject: "rule.minReclaim only applies together with rule.quotaUsageAbove"},
	{name: "defrag e: minReclaim above freeSpaceAbove", kind: defrag, spec: "clusterRef: {name: c}\nrule: {quotaUsageAbove: 80%, freeSpaceAbove: 100Mi, minReclaim: 200Mi}", reject: "rule.minReclaim cannot be larger than rule.freeSpaceAbove"},
	{name: "defrag e: minReclaim within freeSpaceAbove", kind: defrag, spec: "clusterRef: {name: c}\nrule: {quotaUsageAbove: 80%, freeSpaceAbove: 200Mi, minReclaim: 200Mi}"},
	{name: "defrag quota usage 0%", kind: defrag, spec: "clusterRef: {name: c}\nrule: {quotaUsageAbove: 0%}", reject: "spec.rule.quotaUsageAbove in body should match"},
	{name: "defrag quota usage 101%", kind: defrag, spec: "clusterRef: {name: c}\nrule: {quotaUsageAbove: 101%}", reject: "spec.rule.quotaUsageAbove in body should match"},
	{name: "defrag quota usage 100%", kind: defrag, spec: "clusterRef: {name: c}\nrule: {quotaUsageAbove: 100%}"},
	{name: "defrag ttl negative", kind: defrag, spec: "clusterRef: {name: c}\nttlSecondsAfterFinished: -1", reject: "spec.ttlSecondsAfterFinished in body should be greater than or equal to 0"},

	// EtcdDefragPolicy: the reference accepts any non-empty schedule (a bad
	// one is reported in status), an empty cluster name, and the same rule
	// set as EtcdDefrag.
	{name: "policy minimal", kind: policy, spec: policyMin},
	{name: "policy reference example", kind: policy, spec: policyMin + "\nconcurrencyPolicy: Forbid\nttlSecondsAfterFinished: 3600\nhistoryLimit: 3\nrule: {freeSpaceAbove: 200Mi, quotaUsageAbove: 80%, minReclaim: 32Mi}"},
	{name: "policy every field", kind: policy, spec: policyMin + "\nsuspend: true\nconcurrencyPolicy: Allow\nstartingDeadlineSeconds: 0\nhistoryLimit: 0\nrule: {all: true}\nttlSecondsAfterFinished: 0"},
	{name: "policy CRON_TZ prefix", kind: policy, spec: "clusterRef: {name: c}\nschedule: 'CRON_TZ=Europe/Berlin 0 3 * * *'"},
	{name: "policy TZ prefix", kind: policy, spec: "clusterRef: {name: c}\nschedule: 'TZ=UTC 0 3 * * *'"},
	{name: "policy descriptor", kind: policy, spec: "clusterRef: {name: c}\nschedule: '@every 1h'"},
	{name: "policy bad cron accepted", kind: policy, spec: "clusterRef: {name: c}\nschedule: '61 * * * *'"},
	{name: "policy empty cluster name accepted", kind: policy, spec: "clusterRef: {name: ''}\nschedule: '@daily'"},
	{name: "policy needs a schedule", kind: policy, spec: "clusterRef: {name: c}", reject: "spec.schedule: Required value"},
	{name: "policy empty schedule", kind: policy, spec: "clusterRef: {name: c}\nschedule: ''", reject: "spec.schedule in body should be at least 1 chars long"},
	{name: "policy needs a cluster", kind: policy, spec: "schedule: '@daily'", reject: "spec.clusterRef: Required value"},
	{name: "policy concurrency Replace", kind: policy, spec: policyMin + "\nconcurrencyPolicy: Replace", reject: `supported values: "Allow", "Forbid"`},
	{name: "policy deadline negative", kind: policy, spec: policyMin + "\nstartingDeadlineSeconds: -1", reject: "spec.startingDeadlineSeconds in body should be greater than or equal to 0"},
	{name: "policy history negative", kind: policy, spec: policyMin + "\nhistoryLimit: -1", reject: "spec.historyLimit in body should be greater than or equal to 0"},
	{name: "policy ttl negative", kind: policy, spec: policyMin + "\nttlSecondsAfterFinished: -1", reject: "spec.ttlSecondsAfterFinished in body should be greater than or equal to 0"},
	{name: "policy rule a: all with thresholds", kind: policy, spec: policyMin + "\nrule: {all: true, freeSpaceAbove: 1Gi}", reject: "rule.all: true defragments every member and cannot be combined"},
	{name: "policy rule b: freeSpaceAbove integer zero", kind: policy, spec: policyMin + "\nrule: {freeSpaceAbove: 0}", reject: "rule.freeSpaceAbove must be greater than zero"},
	{name: "policy rule b: freeSpaceAbove integer bytes", kind: policy, spec: policyMin + "\nrule: {freeSpaceAbove: 209715200}"},
	{name: "policy rule c: minReclaim zero", kind: policy, spec: policyMin + "\nrule: {quotaUsageAbove: 80%, minReclaim: '0'}", reject: "rule.minReclaim must be greater than zero"},
	{name: "policy rule d: minReclaim alone", kind: policy, spec: policyMin + "\nrule: {minReclaim: 64Mi}", reject: "rule.minReclaim only applies together with rule.quotaUsageAbove"},
	{name: "policy rule e: minReclaim above freeSpaceAbove", kind: policy, spec: policyMin + "\nrule: {quotaUsageAbove: 80%, freeSpaceAbove: 100Mi, minReclaim: 200Mi}", reject: "rule.minReclaim cannot be larger than rule.freeSpaceAbove"},
	{name: "policy rule quota usage 100%", kind: policy, spec: policyMin + "\nrule: {quotaUsageAbove: 100%}"},
	{name: "policy rule quota usage 101%", kind: policy, spec: policyMin + "\nrule: {quotaUsageAbove: 101%}", reject: "spec.rule.quotaUsageAbove in body should match"},
	{name: "policy time zone", kind: policy, spec: policyMin + "\ntimeZone: Europe/Berlin"},
	{name: "policy time zone not a name", kind: policy, spec: policyMin + "\ntimeZone: ../../etc/passwd", reject: "spec.timeZone in body should match"},
	{name: "policy time zone twice", kind: policy, spec: "clusterRef: {name: c}\nschedule: 'CRON_TZ=UTC 0 3 * * *'\ntimeZone: Europe/Berlin", reject: "set the time zone either in spec.timeZone or as a CRON_TZ=/TZ= prefix of spec.schedule, not both"},
	{name: "policy spec stays editable", kind: policy, spec: policyMin, update: "clusterRef: {name: d}\nschedule: '@hourly'\nsuspend: true"},
}

func TestCELRules(t *testing.T) {
	ns := namespace(t)
	for _, tc := range celCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.apply(t, ns)
			switch {
			case tc.reject == "" && err != nil:
				t.Fatalf("rejected, want accepted: %v", err)
			case tc.reject != "" && err == nil:
				t.Fatalf("accepted, want rejected with %q", tc.reject)
			case tc.reject != "" && !strings.Contains(err.Error(), tc.reject):
				t.Fatalf("rejected with\n  %v\nwant a message containing\n  %q", err, tc.reject)
			}
		})
	}
}

// apply sends the case's manifest (and its update) and returns the verdict on
// the last request.
func (tc celCase) apply(t *testing.T, ns string) error {
	t.Helper()
	ctx := context.Background()
	obj := object(t, tc.kind, ns, tc.spec)
	err := k.Create(ctx, obj)
	if tc.update == "" {
		return err
	}
	if err != nil {
		t.Fatalf("creating the object to update: %v", err)
	}
	if err := unstructured.SetNestedField(obj.Object, parseSpec(t, tc.update), "spec"); err != nil {
		t.Fatal(err)
	}
	return k.Update(ctx, obj)
}

// object builds a manifest of kind with the given spec in YAML.
func object(t *testing.T, kind, ns, spec string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"spec": parseSpec(t, spec)}}
	u.SetAPIVersion(v1alpha2.GroupVersion.String())
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetGenerateName("cel-")
	return u
}

func parseSpec(t *testing.T, spec string) map[string]any {
	t.Helper()
	out := map[string]any{}
	if err := yaml.Unmarshal([]byte(spec), &out); err != nil {
		t.Fatalf("bad spec in test case: %v\n%s", err, spec)
	}
	return out
}

// TestSnapshotMetadataStaysMutable: the immutable spec of an EtcdSnapshot
// leaves its labels (and so selectors and retention tools) free to change.
func TestSnapshotMetadataStaysMutable(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	obj := object(t, snapshot, ns, snapS3)
	if err := k.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	obj.SetLabels(map[string]string{"keep": "forever"})
	if err := k.Update(ctx, obj); err != nil {
		t.Fatalf("a label change on an EtcdSnapshot was refused: %v", err)
	}
}
