package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// TestAuthentication runs a server-TLS cluster with etcd authentication
// and a client writing as root: authentication comes on once the cluster
// formed; a client without credentials (or with a wrong password) is
// refused, root is served; membership changes, pause and resume go on; a
// new password in the Secret is applied to etcd, after which the old one is
// refused.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-auth")
	const name = "guarded"
	ca := newNamedCA(t, "e2e auth CA")
	domains := []string{"*." + name + "." + ns + ".svc", "*." + name + "." + ns + ".svc.cluster.local", name + "-client." + ns + ".svc", "localhost"}
	server := ca.issue(t, "server", domains, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	createTLSSecret(t, ns, "server-tls", server, ca.certPEM)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.certPEM)
	clientTLS.Store(ns+"/"+name, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	var password atomic.Pointer[string]
	first := "first-password"
	password.Store(&first)
	clientPassword.Store(ns+"/"+name, &password)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "root-creds"}, Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{"username": []byte("root"), "password": []byte(first)}}
	if err := k.Create(context.Background(), creds); err != nil {
		t.Fatal(err)
	}

	newCluster(t, ns, name, 3, func(c *v1alpha2.EtcdCluster) {
		c.Spec.TLS = &v1alpha2.EtcdClusterTLS{Client: &v1alpha2.ClientTLS{ServerSecretRef: &corev1.LocalObjectReference{Name: "server-tls"}}}
		c.Spec.Auth = &v1alpha2.AuthSpec{Enabled: true, RootCredentialsSecretRef: &corev1.LocalObjectReference{Name: "root-creds"}}
	})
	waitReconciled(t, ns, name, 3, 4*time.Minute)
	if !getCluster(t, ns, name).Status.AuthEnabled {
		t.Fatal("reconciled without authentication latched")
	}
	w := startWriter(t, ns, name)
	w.requireWritesAfter("", 10, time.Minute)
	if err := readAs(ns, name, "", ""); !errors.Is(err, etcd.ErrAuthRequired) {
		t.Errorf("a client without credentials: %v, want authentication required", err)
	}
	if err := readAs(ns, name, "root", "wrong"); err == nil {
		t.Error("a wrong password was accepted")
	}
	if err := readAs(ns, name, "root", first); err != nil {
		t.Errorf("root was refused: %v", err)
	}

	// Membership changes log in.
	w.mark("scaling")
	setReplicas(t, ns, name, 1)
	waitReconciled(t, ns, name, 1, 3*time.Minute)
	setReplicas(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 4*time.Minute)
	w.mark("scaled")
	w.requireWritesAfter("scaled", 10, time.Minute)

	// Pause and resume: the dormant member comes back and logs in.
	setReplicas(t, ns, name, 0)
	waitReconciled(t, ns, name, 0, 3*time.Minute)
	eventually(t, 2*time.Minute, "no pods left in the paused cluster", func() (bool, string) {
		n := len(pods(t, ns, name))
		return n == 0, fmt.Sprintf("%d pods", n)
	})
	setReplicas(t, ns, name, 3)
	waitReconciled(t, ns, name, 3, 4*time.Minute)
	w.mark("resumed")
	w.requireWritesAfter("resumed", 10, time.Minute)

	// A new password.
	second := "second-password"
	updateSecret(t, ns, "root-creds", map[string][]byte{"password": []byte(second)})
	eventually(t, 2*time.Minute, "the new password applied", func() (bool, string) {
		err := readAs(ns, name, "root", second)
		return err == nil, errString(err)
	})
	password.Store(&second)
	w.mark("password changed")
	if err := readAs(ns, name, "root", first); err == nil {
		t.Error("the old password still works after the change")
	}
	applied := &corev1.Secret{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: manifest.AppliedPasswordSecretName(name)}, applied); err != nil || string(applied.Data["password"]) != second {
		t.Errorf("the operator's record of the password: %v", err)
	}
	waitReconciled(t, ns, name, 3, 2*time.Minute)
	w.verify("password changed")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// readAs reads from the cluster as a user ("" for none), classified as the
// operator classifies etcd's errors.
func readAs(ns, cluster, user, password string) error {
	eps, err := podEndpoints(ns, cluster)
	if err != nil {
		return err
	}
	v, _ := clientTLS.Load(ns + "/" + cluster)
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 3 * time.Second, Logger: zap.NewNop(), TLS: v.(*tls.Config),
		Username: user, Password: password,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(etcd.ResolvingDialer(podAddress(ns, cluster)))}})
	if err != nil {
		return etcd.Classify(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.Get(ctx, "auth-probe")
	return etcd.Classify(err)
}
