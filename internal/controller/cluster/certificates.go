package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// certManagerPoll is how often a cluster waiting for cert-manager looks
// again. Certificates are not watched by the controller: a watch on a kind
// whose CRD is not installed would keep the manager from starting. They are
// read from the cache, whose informer for them starts at the first read.
const certManagerPoll = 30 * time.Second

// ensureCertificates creates the cert-manager Certificates the cluster's TLS
// asks for; cert-manager writes the Secrets the members mount, and members
// wait for those (SecretMissing) on their own. It runs before anything else:
// without cert-manager the cluster gets nothing it could only half use.
//
// A Certificate is created once and never changed: cert-manager renews it,
// and the issuers it is made from cannot change (CEL; a TLS hand-over only
// adds Certificates). One of the same name that is not the cluster's is
// reported and left alone, and holds a hand-over (Blocked).
func (r *Reconciler) ensureCertificates(ctx context.Context, w *world) error {
	if !manifest.UsesCertManager(w.cluster) {
		return nil
	}
	served, err := r.certificatesServed()
	if err != nil {
		return err
	}
	if !served {
		r.certManagerMissing(w)
		return nil
	}
	want, err := manifest.Certificates(w.cluster, r.ClusterDomain)
	if err != nil {
		return err
	}
	for _, cert := range want {
		served, err := r.ensureCertificate(ctx, w, cert)
		if err != nil {
			return err
		}
		if !served {
			// The CRD went away after the RESTMapper had seen it.
			r.certManagerMissing(w)
			return nil
		}
	}
	return nil
}

// certificatesServed asks the manager's RESTMapper whether the API server
// serves cert-manager.io/v1 Certificates. controller-runtime's mapper keeps a
// kind once found, and on a miss for a given version asks discovery again
// (GET /apis/cert-manager.io/v1) rather than remembering the miss, so
// cert-manager installed after the operator started is seen at the next
// pass, without a restart.
func (r *Reconciler) certificatesServed() (bool, error) {
	_, err := r.Client.RESTMapper().RESTMapping(manifest.CertificateGVK.GroupKind(), manifest.CertificateGVK.Version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	default:
		return false, fmt.Errorf("looking up cert-manager's Certificate kind: %w", err)
	}
}

// ensureCertificate creates one Certificate unless one of its name exists.
// It reports false when the API server does not serve Certificates (any
// more).
func (r *Reconciler) ensureCertificate(ctx context.Context, w *world, want *unstructured.Unstructured) (bool, error) {
	have := &metav1.PartialObjectMetadata{}
	have.SetGroupVersionKind(manifest.CertificateGVK)
	// From the cache: its informer for Certificates' metadata starts at the
	// first read, once the RESTMapper knows the kind.
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case err == nil:
		if !metav1.IsControlledBy(have, w.cluster) {
			r.foreignCertificate(w, want)
		}
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	case !apierrors.IsNotFound(err):
		return true, fmt.Errorf("reading Certificate %s: %w", want.GetName(), err)
	}
	err = r.Client.Create(ctx, want)
	switch {
	case err == nil:
		secret, _, _ := unstructured.NestedString(want.Object, "spec", "secretName")
		logf(ctx, w)("Created a cert-manager Certificate; cert-manager writes its Secret, which the members wait for",
			"certificate", want.GetName(), "secret", secret)
		return true, nil
	case apierrors.IsAlreadyExists(err):
		// Made meanwhile; the next pass looks at whose it is.
		return true, nil
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		// The API server no longer serves the kind (a 404 for the
		// collection, not for an object).
		return false, nil
	default:
		return true, fmt.Errorf("creating Certificate %s: %w", want.GetName(), err)
	}
}

// certManagerMissing records that cert-manager is not installed. A cluster
// that never formed waits for it (nothing could start); a formed one goes on
// (its members run on the Secrets they have) and reports it.
func (r *Reconciler) certManagerMissing(w *world) {
	w.features.certManagerMissing = fmt.Sprintf("cert-manager is not installed: the API server does not serve certificates.cert-manager.io/v1, which %s needs. "+
		"Install cert-manager (https://cert-manager.io/docs/installation/); the operator checks again every %s and then creates the Certificates",
		strings.Join(certManagerFields(w), " and "), certManagerPoll)
}

// certManagerFields names the spec fields that ask for cert-manager.
func certManagerFields(w *world) []string {
	var out []string
	if t := w.cluster.Spec.TLS; t != nil {
		if t.Client != nil && t.Client.CertManager != nil {
			out = append(out, "spec.tls.client.certManager")
		}
		if t.Peer != nil && t.Peer.CertManager != nil {
			out = append(out, "spec.tls.peer.certManager")
		}
	}
	return out
}

// foreignCertificate reports a Certificate of the operator's name that the
// cluster does not control. Adopting it could take over someone else's
// object; replacing it could break whoever made it.
func (r *Reconciler) foreignCertificate(w *world, want *unstructured.Unstructured) {
	secret, _, _ := unstructured.NestedString(want.Object, "spec", "secretName")
	msg := fmt.Sprintf("Certificate %s exists and is not controlled by this EtcdCluster: the operator leaves it as it is, "+
		"and members use the Secret %s whatever writes it. Delete the Certificate to have the operator create its own",
		want.GetName(), secret)
	w.features.foreignCertificates = append(w.features.foreignCertificates, msg)
}
