package e2e

import (
	"context"
	"crypto/sha1" //nolint:gosec // MinIO's role name, see withWebIdentity
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/test/infra/sandbox/images"
)

// s3Server is a MinIO Pod of a suite's namespace, with a Service, reachable
// from the test on the host at the Pod's address. It serves HTTPS with a
// certificate from a private CA, as a store inside a company does: every
// location the suites use names the CA's Secret (s3-ca), and the agents
// trust the public roots the operator's image carries and that CA.
type s3Server struct {
	ns        string
	endpoint  string // in the cluster: http://minio.<ns>.svc:9000
	admin     *minio.Client
	accessKey string
	secretKey string
	// audience and roleARN are set when MinIO trusts the cluster's
	// ServiceAccount tokens (withWebIdentity).
	audience, roleARN string
}

// s3Option changes the MinIO startS3 runs.
type s3Option func(*s3Server, *corev1.Container)

// withWebIdentity makes MinIO's STS trust the cluster's ServiceAccount
// tokens issued for audience: the API server is its OpenID provider (its
// discovery document and keys, read without credentials, so the test lets
// anyone read them, as managed clusters do), and a token's role grants
// read and write (MinIO's role policy). The role's ARN is MinIO's name for
// it: the unpadded base64url of the SHA-1 of the client ID.
func withWebIdentity(t *testing.T, audience string) s3Option {
	t.Helper()
	discovery := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-service-account-issuer-discovery"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:unauthenticated"}},
	}
	if err := k.Create(context.Background(), discovery); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sum := sha1.Sum([]byte(audience)) //nolint:gosec // MinIO's own naming of the role, not a security use
	return func(s *s3Server, c *corev1.Container) {
		s.audience, s.roleARN = audience, "arn:minio:iam:::role/"+base64.RawURLEncoding.EncodeToString(sum[:])
		c.Env = append(c.Env,
			corev1.EnvVar{Name: "MINIO_IDENTITY_OPENID_CONFIG_URL", Value: "https://kubernetes.default.svc/.well-known/openid-configuration"},
			corev1.EnvVar{Name: "MINIO_IDENTITY_OPENID_CLIENT_ID", Value: audience},
			corev1.EnvVar{Name: "MINIO_IDENTITY_OPENID_ROLE_POLICY", Value: "readwrite"})
	}
}

const (
	minioUser     = "e2e-admin"
	minioPassword = "e2e-admin-secret"
)

// startS3 runs MinIO in ns (the image the sandbox built from the
// toolchain) over HTTPS, waits until it serves, and stores its credentials
// in the Secret s3-credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)
// and its CA in the Secret s3-ca (ca.crt).
func startS3(t *testing.T, ns string, opts ...s3Option) *s3Server {
	t.Helper()
	ctx := context.Background()
	ref, err := images.MinIO(filepath.Dir(bin))
	if err != nil {
		t.Fatal(err)
	}
	ca := newNamedCA(t, "e2e object store CA")
	host := "minio." + ns + ".svc"
	createTLSSecret(t, ns, "minio-tls", ca.issue(t, host, []string{host, host + ".cluster.local"},
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}), ca.certPEM)
	caSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-ca"}, Data: map[string][]byte{"ca.crt": ca.certPEM}}
	if err := k.Create(ctx, caSecret); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.certPEM)
	labels := map[string]string{"app": "minio"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "minio", Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532)},
			Containers: []corev1.Container{{
				Name: "minio", Image: ref, ImagePullPolicy: corev1.PullIfNotPresent,
				Args: []string{"server", "/data", "--address", ":9000", "--certs-dir", "/certs", "--quiet"},
				Env: []corev1.EnvVar{{Name: "MINIO_ROOT_USER", Value: minioUser}, {Name: "MINIO_ROOT_PASSWORD", Value: minioPassword},
					{Name: "MINIO_BROWSER", Value: "off"}},
				Ports: []corev1.ContainerPort{{Name: "s3", ContainerPort: 9000}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/minio/health/ready", Port: intstr.FromInt32(9000), Scheme: corev1.URISchemeHTTPS}}, PeriodSeconds: 1},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "certs", MountPath: "/certs", ReadOnly: true}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "minio-tls",
					Items: []corev1.KeyToPath{{Key: "tls.crt", Path: "public.crt"}, {Key: "tls.key", Path: "private.key"}, {Key: "ca.crt", Path: "CAs/ca.crt"}}}}}},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "minio", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "s3", Port: 9000, TargetPort: intstr.FromInt32(9000)}}},
	}
	s := &s3Server{ns: ns, endpoint: "https://" + host + ":9000", accessKey: minioUser, secretKey: minioPassword}
	for _, o := range opts {
		o(s, &pod.Spec.Containers[0])
	}
	if err := k.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := k.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "MinIO ready", func() (bool, string) {
		p := &corev1.Pod{}
		if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: "minio"}, p); err != nil {
			return false, err.Error()
		}
		if !podIsReady(p.Status.Conditions) || p.Status.PodIP == "" {
			return false, string(p.Status.Phase)
		}
		// The test reaches the Pod by its address and checks the
		// certificate against the Service's name.
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12}}
		c, err := minio.New(net.JoinHostPort(p.Status.PodIP, "9000"), &minio.Options{Creds: credentials.NewStaticV4(minioUser, minioPassword, ""),
			Secure: true, Transport: tr})
		if err != nil {
			return false, err.Error()
		}
		if _, err := c.ListBuckets(ctx); err != nil {
			return false, err.Error()
		}
		s.admin = c
		return true, ""
	})
	s.secret(t, "s3-credentials", minioUser, minioPassword)
	return s
}

// secret stores S3 credentials under the keys the operator reads.
func (s *s3Server) secret(t *testing.T, name, access, secret string) {
	t.Helper()
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": secret},
	}
	if err := k.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
}

func (s *s3Server) makeBucket(t *testing.T, name string) {
	t.Helper()
	if err := s.admin.MakeBucket(context.Background(), name, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
}

// location addresses a key (a prefix for a snapshot, the object for a
// restore) in a bucket, with the suite's working credentials.
func (s *s3Server) location(bucket, key string) v1alpha2.SnapshotLocation {
	return v1alpha2.SnapshotLocation{S3: &v1alpha2.S3Location{
		Endpoint: s.endpoint, Bucket: bucket, Key: key, ForcePathStyle: true,
		CredentialsSecretRef: corev1.LocalObjectReference{Name: "s3-credentials"},
		CASecretRef:          &corev1.LocalObjectReference{Name: "s3-ca"},
	}}
}

// identityLocation is location with the agents' ServiceAccount token
// traded at MinIO's STS instead of keys (startS3 withWebIdentity).
func (s *s3Server) identityLocation(bucket, key string) v1alpha2.SnapshotLocation {
	l := s.location(bucket, key)
	l.S3.CredentialsSecretRef = corev1.LocalObjectReference{}
	l.S3.WebIdentity = &v1alpha2.S3WebIdentity{Audience: s.audience, RoleARN: s.roleARN, STSEndpoint: s.endpoint}
	return l
}

// objects lists the keys under a prefix, sorted.
func (s *s3Server) objects(t *testing.T, bucket, prefix string) []string {
	t.Helper()
	var out []string
	for obj := range s.admin.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		out = append(out, obj.Key)
	}
	slices.Sort(out)
	return out
}

// snapshotsIn keeps the snapshot files (not their manifests) of a listing.
func snapshotsIn(keys []string) []string {
	var out []string
	for _, k := range keys {
		if strings.HasSuffix(k, ".db") {
			out = append(out, k)
		}
	}
	return out
}

func (s *s3Server) read(t *testing.T, bucket, key string) []byte {
	t.Helper()
	obj, err := s.admin.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = obj.Close() }()
	data, err := io.ReadAll(obj)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func (s *s3Server) put(t *testing.T, bucket, key, data string) {
	t.Helper()
	if _, err := s.admin.PutObject(context.Background(), bucket, key, strings.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}
