package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/encrypt"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/agent/agentenv"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// S3 object metadata the agent writes with every snapshot.
const (
	metaSnapshotUID = "etcd-snapshot-uid"
	metaEtcdVersion = "etcd-version"
)

// Multipart parts: S3 allows at most 10,000 parts of at least 5 MiB. The
// part size follows the database size so that any database fits, and the
// agent holds two parts in memory (one filling, one uploading) whatever the
// snapshot's size.
const (
	minPartSize   = 8 << 20
	maxParts      = 10000
	partsInFlight = 2
)

// S3Config addresses a bucket and a key in it.
type S3Config struct {
	Endpoint       string
	Bucket         string
	Key            string
	Region         string
	ForcePathStyle bool
	// AccessKey and SecretKey are static credentials; when both are empty
	// the standard AWS chain finds them (see s3Credentials).
	AccessKey    string
	SecretKey    string
	SessionToken string
	// CABundle is PEM certificates trusted for the endpoint besides the
	// public roots.
	CABundle string
	// StorageClass of the objects written; the bucket's default when empty.
	StorageClass string
	// SSEType is the server-side encryption asked of the store (S3, KMS,
	// Customer; none when empty), SSEKMSKeyID the KMS key, SSECustomerKey
	// the customer's 256-bit key, base64-encoded.
	SSEType, SSEKMSKeyID, SSECustomerKey string
}

type s3Store struct {
	c      *minio.Client
	bucket string
	prefix string // "" or ending in "/"
	class  string
	// sse is the encryption asked for on writes; readSSE what reads must
	// carry (a customer's key only: the store decrypts the others itself).
	sse, readSSE encrypt.ServerSide
}

// serverSide is the encryption the configuration asks for, or nil.
func serverSide(cfg S3Config) (encrypt.ServerSide, error) {
	switch cfg.SSEType {
	case "":
		return nil, nil
	case v1alpha2.SSETypeS3:
		return encrypt.NewSSE(), nil
	case v1alpha2.SSETypeKMS:
		sse, err := encrypt.NewSSEKMS(cfg.SSEKMSKeyID, nil)
		if err != nil {
			return nil, permanent(conditions.ReasonAgentMisconfigured, "%s: %v", agentenv.EnvS3SSEKMSKeyID, err)
		}
		return sse, nil
	case v1alpha2.SSETypeCustomer:
		key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cfg.SSECustomerKey))
		if err != nil || len(key) != 32 {
			return nil, permanent(conditions.ReasonInvalidDestination,
				"the customer key for server-side encryption (key %q of the Secret in s3.sse.customerKeySecretRef) must be 32 bytes, base64-encoded "+
					"(head -c 32 /dev/urandom | base64); it is %d characters long", v1alpha2.SSECustomerKeyKey, len(strings.TrimSpace(cfg.SSECustomerKey)))
		}
		sse, err := encrypt.NewSSEC(key)
		if err != nil {
			return nil, permanent(conditions.ReasonInvalidDestination, "the customer key for server-side encryption: %v", err)
		}
		return sse, nil
	}
	return nil, permanent(conditions.ReasonAgentMisconfigured, "%s must be %s, %s or %s, not %q", agentenv.EnvS3SSEType,
		v1alpha2.SSETypeS3, v1alpha2.SSETypeKMS, v1alpha2.SSETypeCustomer, cfg.SSEType)
}

// newS3Store connects to a bucket; prefix is the key prefix the store's
// names live under.
func newS3Store(cfg S3Config, prefix string) (*s3Store, error) {
	host, secure, err := parseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	transport, err := s3Transport(cfg, secure)
	if err != nil {
		return nil, err
	}
	creds, err := s3Credentials(cfg, transport)
	if err != nil {
		return nil, err
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	lookup := minio.BucketLookupAuto
	if cfg.ForcePathStyle {
		lookup = minio.BucketLookupPath
	}
	c, err := minio.New(host, &minio.Options{
		Creds:        creds,
		Transport:    transport,
		Secure:       secure,
		Region:       region,
		BucketLookup: lookup,
		MaxRetries:   3,
	})
	if err != nil {
		return nil, permanent(conditions.ReasonInvalidDestination, "S3 endpoint %q: %v", cfg.Endpoint, err)
	}
	p, err := cleanRelative(prefix, "S3 key")
	if err != nil {
		return nil, err
	}
	if p != "" {
		p += "/"
	}
	sse, err := serverSide(cfg)
	if err != nil {
		return nil, err
	}
	st := &s3Store{c: c, bucket: cfg.Bucket, prefix: p, class: cfg.StorageClass, sse: sse}
	if sse != nil && sse.Type() == encrypt.SSEC {
		if !secure {
			return nil, permanent(conditions.ReasonInvalidDestination, "server-side encryption with a customer key needs an https:// endpoint, not %q", cfg.Endpoint)
		}
		st.readSSE = sse
	}
	return st, nil
}

// s3Credentials are the static keys when given; with neither key, the
// standard AWS credential chain: the environment (AWS_ACCESS_KEY_ID...), the
// shared credentials file, then the IAM sources: a web identity token file
// (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN: EKS IRSA, GKE and Azure
// workload identity federation), the container credentials endpoint (ECS,
// EKS Pod Identity), and the instance metadata service. A web identity is
// exchanged at AWS's STS unless AWS_ENDPOINT_URL_STS (the SDKs' setting
// for one service's endpoint) names another one, such as MinIO's; the
// exchange trusts what the store's own connection trusts (the CA bundle).
func s3Credentials(cfg S3Config, transport http.RoundTripper) (*credentials.Credentials, error) {
	switch {
	case cfg.AccessKey != "" && cfg.SecretKey != "":
		return credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken), nil
	case cfg.AccessKey != "" || cfg.SecretKey != "":
		return nil, permanent(conditions.ReasonAgentMisconfigured, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must both be set, or neither (the AWS credential chain)")
	}
	iam := &credentials.IAM{Client: &http.Client{Transport: transport}}
	tokenFile := os.Getenv(agentenv.EnvWebIdentityTokenFile)
	if tokenFile != "" {
		// Only then: without a token file the provider's endpoint is the
		// instance metadata service's.
		iam.Endpoint = os.Getenv(agentenv.EnvSTSEndpoint)
	}
	return credentials.New(&credentialChain{
		providers: []credentials.Provider{&credentials.EnvAWS{}, &credentials.FileAWSCredentials{}, iam},
		iam:       iam, tokenFile: tokenFile,
	}), nil
}

// credentialChain is the AWS chain, first source with keys wins, except
// that a web identity token that is there but is not exchanged is an error
// that says why; minio-go's own chain goes on anonymously then, and the
// store's refusal ("access denied") would hide the cause.
type credentialChain struct {
	providers []credentials.Provider
	iam       *credentials.IAM
	tokenFile string
	current   credentials.Provider
}

func (c *credentialChain) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	var iamErr error
	for _, p := range c.providers {
		v, err := p.RetrieveWithCredContext(cc)
		if v.AccessKeyID != "" || v.SecretAccessKey != "" {
			c.current = p
			return v, nil
		}
		if p == c.iam {
			iamErr = err
		}
	}
	if c.tokenFile != "" {
		return credentials.Value{}, &webIdentityError{tokenFile: c.tokenFile, sts: c.iam.Endpoint, err: iamErr}
	}
	return credentials.Value{SignerType: credentials.SignatureAnonymous}, nil
}

func (c *credentialChain) Retrieve() (credentials.Value, error) {
	return c.RetrieveWithCredContext(nil)
}

func (c *credentialChain) IsExpired() bool { return c.current == nil || c.current.IsExpired() }

// stsRefusals are the STS's answers to AssumeRoleWithWebIdentity that the
// same token will always get; any other (the IdP not reached, the STS not
// ready) may pass on a later try.
var stsRefusals = map[string]bool{
	"InvalidIdentityToken": true, "IDPRejectedClaim": true, "ExpiredTokenException": true, "ExpiredToken": true,
	"AccessDenied": true, "InvalidParameterValue": true, "InvalidClientTokenId": true, "MalformedPolicyDocument": true,
}

// webIdentityError: the web identity token was not exchanged for
// credentials.
type webIdentityError struct {
	tokenFile, sts string
	err            error
}

func (e *webIdentityError) Error() string {
	sts := e.sts
	if sts == "" {
		sts = "AWS's STS"
	}
	return fmt.Sprintf("the web identity token in %s was not exchanged for credentials at %s: %v", e.tokenFile, sts, e.err)
}

func (e *webIdentityError) Unwrap() error { return e.err }

// s3Transport trusts the public roots and, when given, the CA bundle.
func s3Transport(cfg S3Config, secure bool) (http.RoundTripper, error) {
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, err
	}
	if cfg.CABundle == "" {
		return tr, nil
	}
	if !secure {
		return nil, permanent(conditions.ReasonInvalidDestination, "a CA bundle is given for the plain-HTTP endpoint %s: use https://", cfg.Endpoint)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM([]byte(cfg.CABundle)) {
		return nil, permanent(conditions.ReasonInvalidDestination, "the S3 CA bundle holds no PEM certificate")
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return tr, nil
}

// parseEndpoint takes http://host:port or https://host (a bare host means
// https) and returns the host and whether TLS is used.
func parseEndpoint(endpoint string) (string, bool, error) {
	if !strings.Contains(endpoint, "://") {
		endpoint = "https://" + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return "", false, permanent(conditions.ReasonInvalidDestination, "S3 endpoint %q is not a URL such as https://s3.example.com", endpoint)
	}
	if u.Path != "" && u.Path != "/" {
		return "", false, permanent(conditions.ReasonInvalidDestination, "S3 endpoint %q has a path; give the scheme and host only (the bucket is spec'd apart)", endpoint)
	}
	switch u.Scheme {
	case "http":
		return u.Host, false, nil
	case "https":
		return u.Host, true, nil
	}
	return "", false, permanent(conditions.ReasonInvalidDestination, "S3 endpoint %q: scheme must be http or https", endpoint)
}

func (s *s3Store) URI(name string) string {
	return fmt.Sprintf("s3://%s/%s%s", s.bucket, s.prefix, name)
}

// Check lists one key: a GET, whose error body tells a missing bucket from
// bad credentials (a HEAD's does not).
func (s *s3Store) Check(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	obj, ok := <-s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix, MaxKeys: 1})
	if ok && obj.Err != nil {
		return s3Error(obj.Err, "listing bucket "+s.bucket)
	}
	return nil
}

func (s *s3Store) Stat(ctx context.Context, name string) (*fileInfo, error) {
	obj, err := s.c.StatObject(ctx, s.bucket, s.prefix+name, minio.StatObjectOptions{ServerSideEncryption: s.readSSE})
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, nil
		}
		return nil, s.readError(err, "reading "+s.URI(name))
	}
	return &fileInfo{Size: obj.Size, Meta: fileMeta{
		SnapshotUID: metaValue(obj.UserMetadata, metaSnapshotUID),
		EtcdVersion: metaValue(obj.UserMetadata, metaEtcdVersion),
	}}, nil
}

// metaValue finds user metadata whatever case the store returned its key in.
func metaValue(m map[string]string, key string) string {
	for k, v := range m {
		if strings.EqualFold(k, key) || strings.EqualFold(k, "X-Amz-Meta-"+key) {
			return v
		}
	}
	return ""
}

// Write streams r as a multipart upload; an upload that fails is aborted,
// so the key never holds a part of a snapshot.
func (s *s3Store) Write(ctx context.Context, name string, r io.Reader, sizeHint int64, meta fileMeta) error {
	part := uint64(minPartSize)
	if want := uint64(sizeHint) * 5 / 4 / maxParts; want > part {
		part = (want + 1<<20 - 1) &^ (1<<20 - 1)
	}
	md := map[string]string{}
	if meta.SnapshotUID != "" {
		md[metaSnapshotUID] = meta.SnapshotUID
	}
	if meta.EtcdVersion != "" {
		md[metaEtcdVersion] = meta.EtcdVersion
	}
	_, err := s.c.PutObject(ctx, s.bucket, s.prefix+name, r, -1, minio.PutObjectOptions{
		UserMetadata:          md,
		ContentType:           "application/octet-stream",
		PartSize:              part,
		NumThreads:            partsInFlight,
		ConcurrentStreamParts: true,
		ServerSideEncryption:  s.sse,
		StorageClass:          s.class,
	})
	if err != nil {
		var ae *Error
		if errors.As(err, &ae) {
			return ae
		}
		return s3Error(err, "uploading "+s.URI(name))
	}
	return nil
}

func (s *s3Store) Read(ctx context.Context, name string) (io.ReadCloser, error) {
	obj, err := s.c.GetObject(ctx, s.bucket, s.prefix+name, minio.GetObjectOptions{ServerSideEncryption: s.readSSE})
	if err != nil {
		return nil, s.readError(err, "reading "+s.URI(name))
	}
	return &s3Reader{obj: obj, uri: s.URI(name), store: s}, nil
}

// s3Reader maps the errors of a lazily opened object.
type s3Reader struct {
	obj   *minio.Object
	uri   string
	store *s3Store
}

func (r *s3Reader) Read(p []byte) (int, error) {
	n, err := r.obj.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		return n, r.store.readError(err, "reading "+r.uri)
	}
	return n, err
}

func (r *s3Reader) Close() error { return r.obj.Close() }

func (s *s3Store) Remove(ctx context.Context, name string) error {
	if err := s.c.RemoveObject(ctx, s.bucket, s.prefix+name, minio.RemoveObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil
		}
		return s3Error(err, "deleting "+s.URI(name))
	}
	return nil
}

func (s *s3Store) List(ctx context.Context) ([]string, error) {
	var out []string
	for obj := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix}) {
		if obj.Err != nil {
			return nil, s3Error(obj.Err, "listing "+s.URI(""))
		}
		if name := strings.TrimPrefix(obj.Key, s.prefix); name != "" && !strings.HasSuffix(name, "/") {
			out = append(out, name)
		}
	}
	return out, nil
}

// untrusted reports whether err is a TLS certificate the agent does not
// trust: an unknown signer, or a certificate for another name.
func untrusted(err error) bool {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	return errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) || errors.As(err, &verify)
}

// readError is s3Error for a read. A store refuses the read of an object
// written with a customer key given another key as it refuses a caller
// without the right (AccessDenied): with a customer key, the message says
// both.
func (s *s3Store) readError(err error, doing string) *Error {
	e := s3Error(err, doing)
	if s.readSSE != nil && e.Reason == conditions.ReasonS3AccessDenied {
		e.Err = fmt.Errorf("%w; or the customer key (s3.sse.customerKeySecretRef) is not the one the object was written with", e.Err)
	}
	return e
}

// encryptionRefused reports whether the store refused a request for what
// its server-side encryption asked: no KMS configured, no such key, no
// right to use it, or a customer key missing or not the object's.
func encryptionRefused(resp minio.ErrorResponse) bool {
	msg := strings.ToLower(resp.Message)
	if resp.Code == "" {
		return false
	}
	return strings.HasPrefix(strings.ToLower(resp.Code), "kms") || strings.Contains(msg, "encrypt") || strings.Contains(msg, "kms") ||
		strings.Contains(msg, "server side") || strings.Contains(msg, "server-side") || strings.Contains(msg, "customer key")
}

// s3Error gives a store error the reason it is reported under.
func s3Error(err error, doing string) *Error {
	if wi := (*webIdentityError)(nil); errors.As(err, &wi) {
		// The STS answered with a refusal (an untrusted issuer, another
		// audience, no such role): the token will not do. Otherwise it may
		// not have been reached: try again.
		var refused credentials.ErrorResponse
		if errors.As(err, &refused) && stsRefusals[refused.STSError.Code] {
			return permanent(conditions.ReasonS3CredentialsRejected, "%s: %v; check the workload identity's role and its trust of the cluster's token issuer", doing, wi)
		}
		return transient(conditions.ReasonStorageUnreachable, "%s: %v", doing, wi)
	}
	resp := minio.ToErrorResponse(err)
	if encryptionRefused(resp) {
		return permanent(conditions.ReasonS3EncryptionRefused,
			"%s: the store refused the server-side encryption (%s: %s); check s3.sse: that the store has a KMS and the key, that the credentials "+
				"may use the key, or, for type Customer, that the key is the one the object was written with", doing, resp.Code, resp.Message)
	}
	switch resp.Code {
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "InvalidSecurity":
		return permanent(conditions.ReasonS3CredentialsRejected,
			"%s: the store rejected the credentials (%s: %s); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the credentials Secret", doing, resp.Code, resp.Message)
	case "AccessDenied", "AllAccessDisabled":
		return permanent(conditions.ReasonS3AccessDenied,
			"%s: access denied (%s); the credentials need s3:ListBucket, s3:GetObject, s3:PutObject and s3:DeleteObject on the bucket", doing, resp.Message)
	case minio.NoSuchBucket:
		return permanent(conditions.ReasonBucketNotFound, "%s: the bucket does not exist; create it, or fix spec.destination.s3.bucket", doing)
	case minio.NoSuchKey:
		return permanent(conditions.ReasonSnapshotNotFound, "%s: no such object", doing)
	case "InvalidStorageClass":
		return permanent(conditions.ReasonInvalidDestination, "%s: the store has no storage class like s3.storageClass (%s)", doing, resp.Message)
	case "":
		if untrusted(err) {
			return permanent(conditions.ReasonS3CertificateNotTrusted,
				"%s: the store's certificate is not trusted (%v); for a store whose CA is private, name a Secret holding the CA's certificate as ca.crt in the location's s3.caSecretRef", doing, err)
		}
		var ne net.Error
		var ue *url.Error
		if errors.As(err, &ne) || errors.As(err, &ue) {
			return transient(conditions.ReasonStorageUnreachable, "%s: the store did not answer: %v", doing, err)
		}
		return transient(conditions.ReasonStorageError, "%s: %v", doing, err)
	}
	return transient(conditions.ReasonStorageError, "%s: %s: %s", doing, resp.Code, resp.Message)
}
