package migrate

import (
	"context"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// legacyOperatorRepositories are the image repositories the legacy operator
// was published under, as the path ends (a mirror keeps the path under a
// registry and prefix of its own). cozystack's repository also carries its
// etcd-operator.cozystack.io releases (v0.5.0 on), which would act on the
// EtcdClusters the tool makes as this operator does: running, it is as
// much in the way.
var legacyOperatorRepositories = []string{"aenix-io/etcd-operator", "cozystack/etcd-operator"}

// operatorsStopped refuses --apply while an operator could act on the
// clusters being adopted: the Deployments named by --legacy-operator and
// --operator must exist, at zero replicas with no Pod left, and no
// Deployment anywhere may run the legacy operator's image unless it is
// stopped the same way. A name alone is not enough: one that matches
// nothing said nothing about the operator that runs under another.
func operatorsStopped(ctx context.Context, c client.Client, o Options) error {
	named := []struct{ flag, role, ref string }{
		{"--legacy-operator", "the legacy operator", o.LegacyOperator},
		{"--operator", "this operator", o.Operator},
	}
	for _, n := range named {
		if err := namedOperatorStopped(ctx, c, n.flag, n.role, n.ref); err != nil {
			return err
		}
	}
	return legacyOperatorsStopped(ctx, c)
}

// namedOperatorStopped checks the Deployment ref (namespace/name) given by
// flag: it must exist and be stopped.
func namedOperatorStopped(ctx context.Context, c client.Client, flag, role, ref string) error {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("%s %q: want the namespace/name of %s's Deployment", flag, ref, role)
	}
	d := &appsv1.Deployment{}
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s's Deployment %s was not found, so nothing shows that it is stopped: pass the namespace/name it runs as with %s (%s), or, if it does not run as a Deployment and you made sure it is stopped, --skip-operator-check. Nothing was changed",
			role, ref, flag, deploymentHint(flag))
	case err != nil:
		return fmt.Errorf("reading %s's Deployment %s: %w", role, ref, err)
	}
	return deploymentStopped(ctx, c, d)
}

// deploymentHint says where to find the name of the Deployment a flag asks
// for.
func deploymentHint(flag string) string {
	if flag == "--legacy-operator" {
		return "kustomize installs it as etcd-operator-system/etcd-operator-controller-manager; Helm as <fullname>-controller-manager in the release's namespace, where <fullname> is the release name when it contains etcd-operator, else <release>-etcd-operator; kubectl get deployments -A | grep controller-manager lists candidates"
	}
	return "this chart names it <fullname>: the release name when it contains etcd-operator, else <release>-etcd-operator"
}

// legacyOperatorsStopped finds, in every namespace, the Deployments that
// run the legacy operator's image, and refuses while any is not stopped.
func legacyOperatorsStopped(ctx context.Context, c client.Client) error {
	list := &appsv1.DeploymentList{}
	if err := c.List(ctx, list); err != nil {
		return fmt.Errorf("listing the Deployments of every namespace, to find a legacy operator still running whatever its name: %w (the tool needs list on deployments and pods cluster-wide; --skip-operator-check skips this once you made sure yourself). Nothing was changed", err)
	}
	var errs []error
	for i := range list.Items {
		d := &list.Items[i]
		image, ok := legacyImageOf(d.Spec.Template.Spec)
		if !ok {
			continue
		}
		if err := deploymentStopped(ctx, c, d); err != nil {
			errs = append(errs, fmt.Errorf("the Deployment %s/%s runs the legacy operator's image %s: %w", d.Namespace, d.Name, image, err))
		}
	}
	return errors.Join(errs...)
}

// legacyImageOf returns the first image of the Pod spec's containers that is
// the legacy operator's.
func legacyImageOf(spec corev1.PodSpec) (string, bool) {
	for _, ctr := range spec.Containers {
		if legacyOperatorImage(ctr.Image) {
			return ctr.Image, true
		}
	}
	return "", false
}

// legacyOperatorImage tells whether an image reference names one of the
// legacy operator's repositories, whatever the registry, tag or digest.
func legacyOperatorImage(image string) bool {
	repo, _, _ := strings.Cut(image, "@")
	if slash, colon := strings.LastIndex(repo, "/"), strings.LastIndex(repo, ":"); colon > slash {
		repo = repo[:colon]
	}
	for _, legacy := range legacyOperatorRepositories {
		if repo == legacy || strings.HasSuffix(repo, "/"+legacy) {
			return true
		}
	}
	return false
}

// deploymentStopped checks that a Deployment is scaled to zero with no Pod
// left running.
func deploymentStopped(ctx context.Context, c client.Client, d *appsv1.Deployment) error {
	ref := d.Namespace + "/" + d.Name
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
		return fmt.Errorf("operator Deployment %s is not scaled to zero: kubectl -n %s scale deployment %s --replicas=0", ref, d.Namespace, d.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return fmt.Errorf("operator Deployment %s: %w", ref, err)
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(d.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return fmt.Errorf("listing the Pods of operator Deployment %s: %w", ref, err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return fmt.Errorf("operator Deployment %s is scaled to zero but its Pod %s still exists: wait until it is gone", ref, p.Name)
		}
	}
	return nil
}
