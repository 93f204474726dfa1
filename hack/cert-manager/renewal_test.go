package main

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRenewal shows the trigger controller re-issuing a Certificate at its
// renewal time: a 1h certificate renewed 59m50s before expiry (the shortest
// pair cert-manager's webhook accepts is 1h and 5m; renewBefore only has to
// stay below the duration) is replaced about ten seconds after issuance.
func TestRenewal(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	issuer := "renewal-" + ns
	if _, err := cm.CertmanagerV1().ClusterIssuers().Create(ctx, selfSignedClusterIssuer(issuer), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crt := certificate(ns, "short", issuedBy("ClusterIssuer", issuer), dnsNames("short."+ns+".svc"),
		lifetime(time.Hour, time.Hour-10*time.Second))
	if _, err := cm.CertmanagerV1().Certificates(ns).Create(ctx, crt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCertificateReady(t, ns, crt.Name)
	first, _, _ := secretCertificates(t, ns, crt.Spec.SecretName)

	eventually(t, "Certificate re-issued with a new serial", issueTimeout, func() (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, crt.Spec.SecretName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		now := parsePEMCertificates(t, s.Data["tls.crt"])
		return now[0].SerialNumber.Cmp(first[0].SerialNumber) != 0, nil
	})
	// The Secret is written before the status, and Ready stays True
	// throughout, so wait for the revision the issuance recorded.
	eventually(t, "Certificate at revision 2 and Ready", issueTimeout, func() (bool, error) {
		renewed := waitCertificateReady(t, ns, crt.Name)
		return renewed.Status.Revision != nil && *renewed.Status.Revision >= 2, nil
	})
}
