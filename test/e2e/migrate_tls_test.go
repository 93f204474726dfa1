package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/migrate"
)

// TestMigrateTLS adopts a legacy cluster that uses every TLS Secret of the
// legacy spec, laid out as the legacy operator wants them (certificates and
// their CAs in Secrets of their own, the server CA under tls.crt), with
// authentication on as the legacy operator turns it on (root without a
// password, authenticated by its certificate's name). A writer that
// authenticates by certificate writes throughout. The dry run changes no
// object and no Secret; the apply, stopped after every step and re-run,
// folds the CAs into ca.crt of the certificate Secrets and gives root a
// password; the operator takes the cluster over without restarting a Pod,
// logs in with that password, and grows it 3 → 5 → 3 with members of its
// own that the legacy certificates serve.
func TestMigrateTLS(t *testing.T) {
	t.Parallel()
	ns := namespace(t, migrateTLSNS)
	installLegacyCRD(t)
	startMigrateOperator(t, ns)
	const name = "vault"

	serverCA, clientCA := newNamedCA(t, "legacy server CA"), newNamedCA(t, "legacy client CA")
	// Both the legacy names and the operator's: members it adds live
	// under the Service <name>; etcd checks a peer's certificate against
	// the reverse lookup of its address (the cluster.local names).
	var domains []string
	for _, svc := range []string{name + "-headless", name} {
		domains = append(domains, "*."+svc+"."+ns+".svc", "*."+svc+"."+ns+".svc.cluster.local")
	}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	serverNames := append(slices.Clone(domains), name+"-client."+ns+".svc")
	createTLSSecret(t, ns, "vault-server", serverCA.issue(t, "server", serverNames, both), nil)
	createTLSSecret(t, ns, "vault-peer", serverCA.issue(t, "peer", domains, both), nil)
	root := clientCA.issue(t, "root", nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	createTLSSecret(t, ns, "vault-operator", root, nil)
	createCASecret(t, ns, "vault-server-ca", "tls.crt", serverCA.certPEM)
	createCASecret(t, ns, "vault-peer-ca", "ca.crt", serverCA.certPEM)
	createCASecret(t, ns, "vault-client-ca", "ca.crt", clientCA.certPEM)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(serverCA.certPEM)
	rootCert, err := tls.X509KeyPair(root.certPEM, root.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	clientTLS.Store(ns+"/"+name, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{rootCert}, MinVersion: tls.VersionTLS12})
	podSelectors.Store(ns+"/"+name, client.MatchingLabels(legacyLabels(name)))

	cr := startLegacyCluster(t, ns, name, 3, func(spec map[string]any) {
		spec["security"] = map[string]any{
			"enableAuth": true,
			"tls": map[string]any{
				"serverSecret": "vault-server", "serverTrustedCASecret": "vault-server-ca",
				"clientSecret": "vault-operator", "clientTrustedCASecret": "vault-client-ca",
				"peerSecret": "vault-peer", "peerTrustedCASecret": "vault-peer-ca",
			},
		}
	})
	enableLegacyAuth(t, ns, name)
	legacyID := legacyClusterID(t, ns, name)
	uids := legacyPodUIDs(t, ns, name)
	w := startWriter(t, ns, name)
	w.requireWritesAfter("", 20, time.Minute)

	secrets := secretVersions(t, ns)
	out := dryRunChangesNothing(t, ns, name,
		"auth on, client TLS on with client certificates (Secret vault-server), peer TLS on (Secret vault-peer)",
		`Secret vault-server: ca.crt gains the CA "CN=legacy server CA"`,
		`Secret vault-server: ca.crt gains the CA "CN=legacy client CA"`,
		`Secret vault-peer: ca.crt gains the CA "CN=legacy server CA"`,
		"AUTH: the legacy root user has no password",
		"serverSecretRef:", "operatorClientSecretRef:", "rootCredentialsSecretRef:",
		"spec.security.tls.clientTrustedCASecret: its CA is added to ca.crt of vault-server")
	if after := secretVersions(t, ns); !maps.Equal(secrets, after) {
		t.Errorf("the dry run changed Secrets:\nbefore %v\nafter  %v", secrets, after)
	}
	if strings.Contains(out, "CERTIFICATES:") {
		t.Error("the dry run says the certificates do not serve new members, which they do")
	}

	w.mark("applying")
	applyStoppedAfterEveryStep(t, ns, name, cr, "")
	w.mark("adopted")
	w.requireWritesBetween("applying", "adopted", 1)
	caBundleHolds(t, ns, "vault-server", serverCA, clientCA)
	caBundleHolds(t, ns, "vault-peer", serverCA)
	password := rootPassword(t, ns, migrate.RootCredentialsSecretName(name))
	if err := readAs(ns, name, "root", password); err != nil {
		t.Errorf("root with the password of the credentials Secret: %v", err)
	}
	if err := readAs(ns, name, "root", password+"-wrong"); !errors.Is(err, etcd.ErrAuthFailed) {
		t.Errorf("root with a wrong password: %v, want an authentication failure", err)
	}
	if err := readAs(ns, name, "app", "app-password"); err != nil {
		t.Errorf("the cluster's own user app after the adoption: %v", err)
	}
	if got := rootRoles(t, ns, name); !slices.Equal(got, []string{"reader", "root"}) {
		t.Errorf("root holds roles %v, want reader and root", got)
	}

	takeOverAndScale(t, ns, name, w, legacyID, uids)
	eventually(t, time.Minute, "authentication latched by the operator", func() (bool, string) {
		st := getCluster(t, ns, name).Status
		return st.AuthEnabled, fmt.Sprintf("authEnabled %v", st.AuthEnabled)
	})
	if err := readWith(ns, name, nil); err == nil {
		t.Error("a client without a certificate was served")
	}

	// The adopted Pods carry the hashes of the certificate material they
	// were adopted with: a renewed server certificate rolls them, one at a
	// time, onto the operator's own Pods (same claims, the data under
	// default.etcd, TLS from the migrated Secrets). From here the writer
	// finds the members by the operator's labels.
	podSelectors.Delete(ns + "/" + name)
	cert := &atomic.Pointer[tls.Certificate]{}
	cert.Store(&rootCert)
	r := &rotation{t: t, ns: ns, name: name, w: w, clientCert: cert}
	renewed := serverCA.issue(t, "server", serverNames, both)
	r.rotate("renew server", map[string]map[string][]byte{"vault-server": pairData(renewed)})
	r.serving("2379", renewed)
	for member, uid := range uids {
		p, ok := pods(t, ns, name)[member]
		if !ok || p.UID == types.UID(uid) {
			t.Errorf("adopted member %s: pod %v (uid %s), want the operator's own", member, ok, p.UID)
		}
	}
	if got := getCluster(t, ns, name).Status.ClusterID; got != legacyID {
		t.Errorf("cluster ID changed from %s to %s", legacyID, got)
	}
	w.verify("renew server rolled")
	t.Logf("longest write stall: applying %v, taking over %v, scaling %v, renewal %v",
		w.longestStall("applying", "adopted"), w.longestStall("adopted", "taken over"),
		w.longestStall("taken over", "scaled"), w.longestStall("renew server", "renew server rolled"))
}

// createCASecret writes a CA certificate under key into a Secret of its
// own, as the legacy spec's *TrustedCASecret fields want.
func createCASecret(t *testing.T, ns, name, key string, caPEM []byte) {
	t.Helper()
	s := &corev1.Secret{}
	s.Name, s.Namespace, s.Data = name, ns, map[string][]byte{key: caPEM}
	if err := k.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// enableLegacyAuth turns authentication on as the legacy operator does:
// role root, user root without a password (it authenticates by the common
// name of the operator's client certificate), the role granted, auth on.
func enableLegacyAuth(t *testing.T, ns, name string) {
	t.Helper()
	c, err := clusterClient(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.RoleAdd(ctx, "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	// A user of the cluster's own, and a role of its that root holds too:
	// the adoption keeps both.
	if _, err := c.RoleAdd(ctx, "reader"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RoleGrantPermission(ctx, "reader", "\x00", "\x00", clientv3.PermissionType(clientv3.PermRead)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UserAdd(ctx, "app", "app-password"); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"app", "root"} {
		if _, err := c.UserGrantRole(ctx, user, "reader"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
}

// rootRoles are the roles etcd's root user holds.
func rootRoles(t *testing.T, ns, name string) []string {
	t.Helper()
	c, err := clusterClient(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := c.UserGet(ctx, "root")
	if err != nil {
		t.Fatal(err)
	}
	roles := slices.Clone(u.Roles)
	slices.Sort(roles)
	return roles
}

// secretVersions are the resourceVersions of the namespace's Secrets.
func secretVersions(t *testing.T, ns string) map[string]string {
	t.Helper()
	list := &corev1.SecretList{}
	if err := k.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range list.Items {
		out[s.Name] = s.ResourceVersion
	}
	return out
}

// caBundleHolds checks that ca.crt of a Secret holds these CAs.
func caBundleHolds(t *testing.T, ns, name string, cas ...*testCA) {
	t.Helper()
	s := &corev1.Secret{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	for _, ca := range cas {
		if !strings.Contains(string(s.Data["ca.crt"]), strings.TrimSpace(string(ca.certPEM))) {
			t.Errorf("ca.crt of Secret %s lacks the CA %s", name, ca.cert.Subject.CommonName)
		}
	}
}

// rootPassword reads the password of a basic-auth Secret.
func rootPassword(t *testing.T, ns, name string) string {
	t.Helper()
	s := &corev1.Secret{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeBasicAuth || len(s.Data["password"]) == 0 {
		t.Fatalf("Secret %s: type %s, %d bytes of password", name, s.Type, len(s.Data["password"]))
	}
	return string(s.Data["password"])
}
