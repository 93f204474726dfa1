package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
)

// TestSnapshotAndRestoreTLS snapshots a cluster that serves clients only
// over mutual TLS and checks credentials (the agent presents the operator's
// client certificate, verifies etcd against the cluster's CA and logs in as
// root) and restores it into a new cluster with TLS of its own and the same
// root password. The snapshot carries etcd's users and its auth switch: a
// cluster restored from it without spec.auth is reported as one etcd asks
// credentials of that the operator does not have.
func TestSnapshotAndRestoreTLS(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-snaptls")
	s3 := startS3(t, ns)
	s3.makeBucket(t, "backups")
	ca := newCA(t)
	const rootPassword = "snapshot-root-password"
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "root-creds"}, Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{"username": []byte("root"), "password": []byte(rootPassword)}}
	if err := k.Create(context.Background(), creds); err != nil {
		t.Fatal(err)
	}
	withAuth := func(name string) func(*v1alpha2.EtcdCluster) {
		var pw atomic.Pointer[string]
		pw.Store(ptr.To(rootPassword))
		clientPassword.Store(ns+"/"+name, &pw)
		return func(c *v1alpha2.EtcdCluster) {
			c.Spec.Auth = &v1alpha2.AuthSpec{Enabled: true, RootCredentialsSecretRef: &corev1.LocalObjectReference{Name: "root-creds"}}
		}
	}
	secure := func(name string) func(*v1alpha2.EtcdCluster) {
		// The agent reaches the client Service: its name is in the server
		// certificate.
		domains := []string{"*." + name + "." + ns + ".svc", "*." + name + "." + ns + ".svc.cluster.local", name + "-client." + ns + ".svc", "localhost"}
		server := ca.issue(t, name+"-server", domains, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
		peer := ca.issue(t, name+"-peer", domains[:2], []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
		operator := ca.issue(t, name+"-operator", nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
		for secret, kp := range map[string]keyPair{name + "-server": server, name + "-peer": peer, name + "-operator": operator} {
			createTLSSecret(t, ns, secret, kp, ca.certPEM)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca.certPEM)
		cert, err := tls.X509KeyPair(operator.certPEM, operator.keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		clientTLS.Store(ns+"/"+name, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		return func(c *v1alpha2.EtcdCluster) {
			c.Spec.TLS = ownTLS(name)
		}
	}
	newCluster(t, ns, "secure", 1, secure("secure"), withAuth("secure"))
	waitReconciled(t, ns, "secure", 1, 5*time.Minute)
	if !getCluster(t, ns, "secure").Status.AuthEnabled {
		t.Fatal("reconciled without authentication latched")
	}
	want := writeKeys(t, ns, "secure", 1000)
	newSnapshot(t, ns, "secure-snap", "secure", s3.location("backups", "secure"))
	snap := waitSnapshot(t, ns, "secure-snap", v1alpha2.SnapshotComplete, "", 5*time.Minute)
	checkArtifact(t, snap, "s3://backups/secure/secure-snap.db")

	newCluster(t, ns, "restored", 3, secure("restored"), withAuth("restored"), restoreFrom(s3.location("backups", "secure/secure-snap.db")))
	// With mutual TLS etcd reads the operator's certificate name as the
	// user: the seed answers, the first membership change is refused.
	newCluster(t, ns, "noauth", 3, secure("noauth"), restoreFrom(s3.location("backups", "secure/secure-snap.db")))
	waitReconciled(t, ns, "restored", 3, 6*time.Minute)
	if got := readKeys(t, ns, "restored"); !maps.Equal(got, want) {
		t.Errorf("restored %d keys, want %d; first difference: %s", len(got), len(want), firstDifference(got, want))
	}
	eventually(t, 3*time.Minute, "the cluster restored without spec.auth reports AuthRequiredNotConfigured", func() (bool, string) {
		c := getCluster(t, ns, "noauth")
		a := meta.FindStatusCondition(c.Status.Conditions, conditions.Available)
		return a != nil && a.Status == metav1.ConditionFalse && a.Reason == conditions.ReasonAuthRequiredNotConfigured, condString(a)
	})
}
