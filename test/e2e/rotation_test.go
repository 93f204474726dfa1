package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"net"
	"strings"
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
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// TestCertificateRotation starts a mutual-TLS cluster whose peer Secret
// lacks its CA (the cluster says which Secret and key, and proceeds once the
// key is there), then rotates its certificates with a client writing: a
// renewal from the same CA, and a move to a new CA in three steps (trust
// both, issue from the new one, trust only the new one). Each change is
// rolled out one member at a time; afterwards every member serves the new
// material, and after the last step a client certificate of the old CA is
// refused, which only a restart makes etcd do.
func TestCertificateRotation(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "e2e-rotate")
	const name = "rotating"
	domains := []string{"*." + name + "." + ns + ".svc", "*." + name + "." + ns + ".svc.cluster.local", name + "-client." + ns + ".svc", "localhost"}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	clientUsage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	oldCA, newCA := newNamedCA(t, "e2e old CA"), newNamedCA(t, "e2e new CA")
	server, peer, operator := oldCA.issue(t, "server", domains, usage), oldCA.issue(t, "peer", domains[:2], usage), oldCA.issue(t, "operator", nil, clientUsage)

	createTLSSecret(t, ns, "server-tls", server, oldCA.certPEM)
	createTLSSecret(t, ns, "operator-tls", operator, oldCA.certPEM)
	// The peer Secret comes without its CA.
	createTLSSecret(t, ns, "peer-tls", peer, nil)

	// The test's client trusts both CAs throughout and presents whichever
	// client certificate is current.
	var clientCert atomic.Pointer[tls.Certificate]
	clientCert.Store(x509Pair(t, operator))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(oldCA.certPEM)
	pool.AppendCertsFromPEM(newCA.certPEM)
	clientTLS.Store(ns+"/"+name, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return clientCert.Load(), nil }})

	newCluster(t, ns, name, 3, func(c *v1alpha2.EtcdCluster) {
		c.Spec.TLS = &v1alpha2.EtcdClusterTLS{
			Client: &v1alpha2.ClientTLS{
				ServerSecretRef:         &corev1.LocalObjectReference{Name: "server-tls"},
				OperatorClientSecretRef: &corev1.LocalObjectReference{Name: "operator-tls"},
			},
			Peer: &v1alpha2.PeerTLS{SecretRef: &corev1.LocalObjectReference{Name: "peer-tls"}},
		}
	})
	eventually(t, 2*time.Minute, "the cluster names the missing key", func() (bool, string) {
		c := getCluster(t, ns, name)
		p, a := conditions.Get(c.Status.Conditions, conditions.Progressing), conditions.Get(c.Status.Conditions, conditions.Available)
		seen := condString(p) + "; " + condString(a)
		named := func(c *metav1.Condition) bool {
			return c != nil && c.Reason == conditions.ReasonSecretMissing && strings.Contains(c.Message, "peer-tls") && strings.Contains(c.Message, "ca.crt")
		}
		return named(p) && named(a), seen
	})
	for _, m := range members(t, ns, name) {
		if r := conditions.Get(m.Status.Conditions, conditions.Ready); r == nil || r.Reason != conditions.ReasonSecretMissing || !strings.Contains(r.Message, "ca.crt") {
			t.Errorf("member %s: Ready %s", m.Name, condString(r))
		}
	}
	if len(pods(t, ns, name)) != 0 {
		t.Fatal("a Pod was created without its CA")
	}
	updateSecret(t, ns, "peer-tls", map[string][]byte{"ca.crt": oldCA.certPEM})
	waitReconciled(t, ns, name, 3, 4*time.Minute)

	r := &rotation{t: t, ns: ns, name: name, w: startWriter(t, ns, name), clientCert: &clientCert}
	r.w.requireWritesAfter("", 10, time.Minute)

	// A renewal: new certificates from the same CA.
	server, peer = oldCA.issue(t, "server", domains, usage), oldCA.issue(t, "peer", domains[:2], usage)
	r.rotate("renewal", map[string]map[string][]byte{"server-tls": pairData(server), "peer-tls": pairData(peer)})
	r.serving("2379", server)
	r.serving("2380", peer)

	// A new CA: first trusted beside the old one.
	both := append(append([]byte{}, oldCA.certPEM...), newCA.certPEM...)
	r.rotate("trust both CAs", map[string]map[string][]byte{"server-tls": {"ca.crt": both}, "peer-tls": {"ca.crt": both}})
	// Then every certificate from the new CA, the operator's and the
	// client's too.
	server, peer, operator = newCA.issue(t, "server", domains, usage), newCA.issue(t, "peer", domains[:2], usage), newCA.issue(t, "operator", nil, clientUsage)
	oldClient := clientCert.Load()
	updateSecret(t, ns, "operator-tls", pairData(operator))
	clientCert.Store(x509Pair(t, operator))
	r.rotate("certificates from the new CA", map[string]map[string][]byte{"server-tls": pairData(server), "peer-tls": pairData(peer)})
	r.serving("2379", server)
	r.serving("2380", peer)
	if err := readWith(ns, name, oldClient); err != nil {
		t.Errorf("while both CAs are trusted, a client certificate of the old CA should still be accepted: %v", err)
	}
	// Last, the old CA is no longer trusted.
	r.rotate("trust the new CA only", map[string]map[string][]byte{"server-tls": {"ca.crt": newCA.certPEM}, "peer-tls": {"ca.crt": newCA.certPEM}})
	if err := readWith(ns, name, oldClient); err == nil {
		t.Error("a client certificate of the retired CA was accepted after the roll-out")
	}
	if err := readWith(ns, name, clientCert.Load()); err != nil {
		t.Errorf("a client certificate of the new CA was refused: %v", err)
	}
	r.w.verify("trust the new CA only rolled")
}

// rotation drives certificate changes on a cluster with a client writing.
type rotation struct {
	t          *testing.T
	ns, name   string
	w          *writer
	clientCert *atomic.Pointer[tls.Certificate]
}

// rotate changes Secrets and waits until every member was restarted onto
// them, one at a time, with writes going on; it reports the longest stall.
func (r *rotation) rotate(step string, secrets map[string]map[string][]byte) {
	r.t.Helper()
	r.roll(step, func() {
		for secret, data := range secrets {
			updateSecret(r.t, r.ns, secret, data)
		}
	})
}

// roll makes a change to certificate material (change returns once the
// material changed) and waits until every member was restarted onto it,
// one at a time, with writes going on; it reports the longest stall.
func (r *rotation) roll(step string, change func()) {
	t, ns, name := r.t, r.ns, r.name
	t.Helper()
	before := pods(t, ns, name)
	changedAt := metav1.Now().Rfc3339Copy()
	r.w.mark(step)
	change()
	eventually(t, 5*time.Minute, step+": every member restarted", func() (bool, string) {
		lr := getCluster(t, ns, name).Status.LastRollOut
		if lr == nil || lr.StartTime.Before(&changedAt) || lr.CompletionTime == nil {
			return false, fmt.Sprintf("last roll-out %+v", lr)
		}
		for n, p := range pods(t, ns, name) {
			if before[n].UID == p.UID {
				return false, "member " + n + " still runs its old Pod"
			}
		}
		return lr.Cause == v1alpha2.RollOutCauseSecrets && len(lr.Restarted) == 3, fmt.Sprintf("last roll-out %+v", lr)
	})
	r.w.mark(step + " rolled")
	waitReconciled(t, ns, name, 3, 3*time.Minute)
	r.w.requireWritesAfter(step+" rolled", 10, time.Minute)
	t.Logf("%s: longest write stall %s", step, r.w.longestStall(step, step+" rolled").Round(time.Millisecond))
}

// serving checks that every member presents the certificate on a port.
func (r *rotation) serving(port string, want keyPair) {
	r.t.Helper()
	r.servingSerial(port, x509Leaf(r.t, want).SerialNumber)
}

// servingSerial checks that every member presents the certificate of a
// serial number on a port.
func (r *rotation) servingSerial(port string, serial *big.Int) {
	r.t.Helper()
	for n, p := range pods(r.t, r.ns, r.name) {
		if got := servedSerial(r.t, p.Status.PodIP, port, r.clientCert.Load()); got.Cmp(serial) != 0 {
			r.t.Errorf("member %s serves certificate %s on port %s, want %s", n, got, port, serial)
		}
	}
}

func pairData(kp keyPair) map[string][]byte {
	return map[string][]byte{"tls.crt": kp.certPEM, "tls.key": kp.keyPEM}
}

func x509Pair(t *testing.T, kp keyPair) *tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(kp.certPEM, kp.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

func x509Leaf(t *testing.T, kp keyPair) *x509.Certificate {
	t.Helper()
	c := x509Pair(t, kp)
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// updateSecret merges data into a Secret's.
func updateSecret(t *testing.T, ns, name string, data map[string][]byte) {
	t.Helper()
	s := &corev1.Secret{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(s.DeepCopy())
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for key, v := range data {
		s.Data[key] = v
	}
	if err := k.Patch(context.Background(), s, patch); err != nil {
		t.Fatal(err)
	}
}

// servedSerial is the serial number of the certificate a member presents on
// a port (the client certificate is presented too: both ports ask for one).
func servedSerial(t *testing.T, ip, port string, cert *tls.Certificate) *big.Int {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(ip, port), &tls.Config{
		InsecureSkipVerify: true, // the serial is what is checked
		Certificates:       []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12,
	})
	if err != nil {
		t.Fatalf("dialling %s:%s: %v", ip, port, err)
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// readWith reads from the cluster with a given client certificate (or
// none), trusting the cluster's registered CAs: nil when etcd served the
// read.
func readWith(ns, cluster string, cert *tls.Certificate) error {
	eps, err := podEndpoints(ns, cluster)
	if err != nil {
		return err
	}
	v, _ := clientTLS.Load(ns + "/" + cluster)
	cfg := v.(*tls.Config).Clone()
	cfg.GetClientCertificate, cfg.Certificates = nil, nil
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return readOnce(ns, cluster, eps, cfg)
}

// readOnce reads a key from the cluster at eps, with TLS when cfg is not
// nil: nil when etcd served the read.
func readOnce(ns, cluster string, eps []string, cfg *tls.Config) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 3 * time.Second, Logger: zap.NewNop(), TLS: cfg,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(etcd.ResolvingDialer(podAddress(ns, cluster)))}})
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.Get(ctx, "probe")
	return err
}
