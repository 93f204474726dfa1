package agent

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/seed74754924/etcd-operator/internal/agent/agentenv"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/test/infra/tools"
)

// oidcIssuer is an OpenID Connect issuer for the test: its discovery
// document and signing keys over HTTP, and tokens signed with its key, as
// the Kubernetes API server issues them for a ServiceAccount (the issuer
// EKS IRSA and the other workload identities federate).
type oidcIssuer struct {
	url string
	key *rsa.PrivateKey
}

func startIssuer(t *testing.T) *oidcIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	iss := &oidcIssuer{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": iss.url, "jwks_uri": iss.url + "/keys",
			"response_types_supported": []string{"id_token"}, "subject_types_supported": []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		b64 := base64.RawURLEncoding.EncodeToString
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
			"kty": "RSA", "use": "sig", "alg": "RS256", "kid": "test",
			"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes()),
		}}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	iss.url = srv.URL
	return iss
}

// token is a signed JWT for audience aud with the MinIO policy claim; key
// signs it (the issuer's own key unless another is given).
func (iss *oidcIssuer) token(t *testing.T, aud, policy string, key *rsa.PrivateKey) string {
	t.Helper()
	if key == nil {
		key = iss.key
	}
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	now := time.Now()
	signed := enc(map[string]string{"alg": "RS256", "typ": "JWT", "kid": "test"}) + "." + enc(map[string]any{
		"iss": iss.url, "sub": "system:serviceaccount:ns:snapshots", "aud": aud,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(), "policy": policy,
	})
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// startSTSMinIO runs a MinIO of its own whose STS accepts web identities
// from iss for the client ID "etcd-operator", with the policy the token's
// claim names; it returns its endpoint and an admin client.
func startSTSMinIO(t *testing.T, iss *oidcIssuer) (string, *minio.Client) {
	t.Helper()
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	const user, password = "stsadmin", "stsadmin-secret"
	cmd := exec.Command(filepath.Join(bin, "minio"), "server", t.TempDir(), "--address", addr, "--console-address", "127.0.0.1:0", "--quiet")
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+user, "MINIO_ROOT_PASSWORD="+password, "MINIO_BROWSER=off",
		"MINIO_IDENTITY_OPENID_CONFIG_URL="+iss.url+"/.well-known/openid-configuration",
		"MINIO_IDENTITY_OPENID_CLIENT_ID=etcd-operator", "MINIO_IDENTITY_OPENID_CLAIM_NAME=policy")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	admin, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(user, password, "")})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return admin.MakeBucket(ctx, "federated", minio.MakeBucketOptions{}) == nil, nil
	})
	if err != nil {
		t.Fatalf("the MinIO with an OpenID issuer did not come up: %v", err)
	}
	// Its STS answers "not initialized" for a moment after the S3 API
	// serves.
	sts, err := credentials.NewSTSWebIdentity("http://"+addr, func() (*credentials.WebIdentityToken, error) {
		return &credentials.WebIdentityToken{Token: iss.token(t, "etcd-operator", "readwrite", nil)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := sts.GetWithContext(nil)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the STS of the MinIO with an OpenID issuer did not come up: %v", err)
	}
	return "http://" + addr, admin
}

// TestS3CredentialsFromAWebIdentity gives the agent no keys, only a web
// identity token file, as a workload identity mounts one: the chain
// exchanges the token at the STS that AWS_ENDPOINT_URL_STS names (MinIO's,
// which checks the token's signature against the issuer's published keys
// and its audience) and stores the snapshot with the credentials it gets.
// A token the issuer did not sign and one for another audience are refused
// by the STS, and reported as such; one whose policy may only read is
// exchanged, and the store denies the writes.
func TestS3CredentialsFromAWebIdentity(t *testing.T) {
	e := startEtcd(t)
	want := fill(t, e.client(t), 20, 10)
	iss := startIssuer(t)
	endpoint, admin := startSTSMinIO(t, iss)
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv(agentenv.EnvSTSEndpoint, endpoint)
	tokenFile := filepath.Join(t.TempDir(), "token")
	t.Setenv(agentenv.EnvWebIdentityTokenFile, tokenFile)
	loc := Location{Kind: "s3", S3: S3Config{Endpoint: endpoint, Bucket: "federated", Key: "db", ForcePathStyle: true}}
	useToken := func(tok string) {
		if err := os.WriteFile(tokenFile, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	useToken(iss.token(t, "etcd-operator", "readwrite", nil))
	res := succeeds(t)(Snapshot(context.Background(), snapshotConfig(e, loc, "federated", "uid-1"), quiet))
	if res.URI != "s3://federated/db/federated.db" {
		t.Errorf("stored at %s", res.URI)
	}
	if _, err := admin.StatObject(context.Background(), "federated", "db/federated.db", minio.StatObjectOptions{}); err != nil {
		t.Errorf("the object is not in the bucket: %v", err)
	}
	from := loc
	from.S3.Key = "db/federated.db"
	restoreAndCompare(t, from, want)

	stranger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, token, reason string }{
		{"forged", iss.token(t, "etcd-operator", "readwrite", stranger), conditions.ReasonS3CredentialsRejected},
		{"other-audience", iss.token(t, "someone-else", "readwrite", nil), conditions.ReasonS3CredentialsRejected},
		{"read-only", iss.token(t, "etcd-operator", "readonly", nil), conditions.ReasonS3AccessDenied},
	} {
		name := c.name
		useToken(c.token)
		res, code := Snapshot(context.Background(), snapshotConfig(e, loc, name, "uid-"+name), quiet)
		mustFail(t, res, code, c.reason, true)
		if _, err := admin.StatObject(context.Background(), "federated", "db/"+name+".db", minio.StatObjectOptions{}); err == nil {
			t.Errorf("%s token: the object was written", name)
		} else if !strings.Contains(err.Error(), "not exist") {
			t.Errorf("%s token: %v", name, err)
		}
		t.Logf("%s token refused: %s: %s", name, res.Reason, res.Message)
	}
}
