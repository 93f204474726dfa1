package lifecycle

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Authentication (issue 10): enabled once the cluster converged, latched,
// and every later dial logs in; a changed password is applied with the old
// one.

func withAuth(c *v1alpha2.EtcdCluster) {
	c.Spec.Auth = &v1alpha2.AuthSpec{Enabled: true, RootCredentialsSecretRef: &corev1.LocalObjectReference{Name: "root-creds"}}
}

// putPassword creates or replaces the user's basic-auth Secret.
func (h *harness) putPassword(pw string) {
	h.t.Helper()
	h.putSecretObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "root-creds"}, Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{"username": []byte("root"), "password": []byte(pw)}})
}

// recorded is the root password in the operator's own Secret.
func (h *harness) recorded() string {
	s := &corev1.Secret{}
	if err := h.raw.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: manifest.AppliedPasswordSecretName("c")}, s); err != nil {
		return ""
	}
	return string(s.Data["password"])
}

func (h *harness) authConverged(want int, pw string) func() bool {
	return func() bool {
		return h.converged("c", want)() && h.getCluster("c").Status.AuthEnabled && h.etcd.AuthOn && h.etcd.RootPassword == pw && h.recorded() == pw
	}
}

func TestAuthEnabledOnceConvergedThenEveryChangeLogsIn(t *testing.T) {
	h := newHarness(t)
	h.putPassword("first")
	h.createCluster("c", 3, withAuth)
	h.run("3 with auth", h.authConverged(3, "first"))
	enable := slices.IndexFunc(h.calls, func(c string) bool { return strings.HasPrefix(c, "auth-enable") })
	lastPromote := -1
	for i, c := range h.calls {
		if strings.HasPrefix(c, "promote") {
			lastPromote = i
		}
	}
	if enable < lastPromote {
		t.Errorf("auth enabled before the cluster converged: %q", h.calls)
	}
	// Membership changes, repair and pause go on logged in.
	h.setReplicas("c", 5)
	h.run("5", h.authConverged(5, "first"))
	h.setReplicas("c", 3)
	h.run("3", h.authConverged(3, "first"))
	h.stopNode(h.nodeOf(h.members("c")[1].Name))
	h.run("repaired", h.authConverged(3, "first"))
	h.setReplicas("c", 0)
	h.run("paused", func() bool { return len(h.pods()) == 0 })
	h.setReplicas("c", 3)
	h.run("resumed", h.authConverged(3, "first"))

	// A new password is applied, logged in with the old one.
	h.putPassword("second")
	h.run("password changed", h.authConverged(3, "second"))
	if !slices.Contains(h.calls, "change-password root") {
		t.Errorf("calls %q", h.calls)
	}
	h.setReplicas("c", 1)
	h.run("1 on the new password", h.authConverged(1, "second"))
}

// etcd's root password changed behind the operator's back: both passwords
// it knows are refused, and the cluster says so; putting the right one in
// the Secret brings it back.
func TestRejectedPasswordIsReported(t *testing.T) {
	h := newHarness(t)
	h.putPassword("first")
	h.createCluster("c", 3, withAuth)
	h.run("3 with auth", h.authConverged(3, "first"))
	h.etcd.RootPassword = "changed by hand"
	h.steps(5)
	c := h.getCluster("c")
	for _, typ := range []string{conditions.Available, conditions.Degraded} {
		if cond := conditions.Get(c.Status.Conditions, typ); cond == nil || cond.Reason != conditions.ReasonAuthCredentialsRejected {
			t.Errorf("%s: %+v", typ, cond)
		}
	}
	h.putPassword("changed by hand")
	h.run("back", h.authConverged(3, "changed by hand"))
}

// etcd with authentication on that the spec does not ask for.
func TestAuthRequiredNotConfigured(t *testing.T) {
	h := newHarness(t)
	h.createCluster("c", 3)
	h.run("3", h.converged("c", 3))
	h.etcd.AuthOn, h.etcd.RootPassword = true, "unknown"
	h.steps(5)
	c := h.getCluster("c")
	for _, typ := range []string{conditions.Available, conditions.Degraded} {
		if cond := conditions.Get(c.Status.Conditions, typ); cond == nil || cond.Reason != conditions.ReasonAuthRequiredNotConfigured {
			t.Errorf("%s: %+v", typ, cond)
		}
	}
}

// A seed whose etcd checks credentials from its first start (restored from
// a snapshot of a cluster with auth) and a spec without auth: nothing joins,
// and the seed and the cluster say why.
func TestSeedAskingForCredentialsIsReported(t *testing.T) {
	h := newHarness(t)
	h.etcd.AuthOn, h.etcd.RootPassword = true, "from the snapshot"
	h.createCluster("c", 3)
	h.steps(10)
	ms := h.members("c")
	if len(ms) != 1 {
		t.Fatalf("%d members, want the seed alone", len(ms))
	}
	if r := conditions.Get(ms[0].Status.Conditions, conditions.Ready); r == nil || r.Reason != conditions.ReasonAuthRequiredNotConfigured {
		t.Errorf("seed Ready = %+v", r)
	}
	c := h.getCluster("c")
	if a := conditions.Get(c.Status.Conditions, conditions.Available); a == nil || a.Reason != conditions.ReasonAuthRequiredNotConfigured {
		t.Errorf("cluster Available = %+v", a)
	}
}
