package migrate

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// Step is one idempotent step of an adoption: each reads what is there and
// does only what is missing, so a run that died after any API call is
// finished by the next.
type Step struct {
	Name string
	What string
	run  func(a *applier, ctx context.Context) error
}

// Steps of an adoption, in order.
var Steps = []Step{
	{"snapshot", "save a snapshot of the data to a local file (unless --skip-backup)", (*applier).snapshot},
	{"secrets", "add to ca.crt of the server and peer Secrets the CAs the legacy cluster keeps in separate Secrets (only with spec.security.tls)", (*applier).secrets},
	{"cluster", "create the EtcdCluster and pre-fill its status (cluster ID, token, target): no bootstrap", (*applier).cluster},
	{"members", "create an EtcdMember per live member and pre-fill its status (member ID, Pod, claim, voter)", (*applier).members},
	{"auth", "give etcd's root user (made without a password by the legacy operator) the password of Secret <cluster>-root-credentials, made with a random one unless it exists: authentication is off for a moment (only with spec.security.enableAuth)", (*applier).auth},
	{"statefulset", "delete the StatefulSet, orphaning its Pods, and wait until it is gone", (*applier).retireStatefulSet},
	{"pods", "hand each Pod and claim to its EtcdMember (owner reference, labels)", (*applier).adoptPods},
	{"services", "give the legacy headless Service and the cluster-state ConfigMap (which the adopted Pods read at every container start) to the EtcdCluster; delete a ClusterIP Service named like the cluster", (*applier).services},
	{"legacy", "delete the PodDisruptionBudget and the legacy EtcdCluster (orphaning the rest), and wait until it is gone", (*applier).retireLegacy},
}

// ErrStopped is returned when the run stopped after the step it was told to
// (a hidden flag that tests use to crash the tool between steps).
var ErrStopped = errors.New("stopped after the requested step")

// ApplyOptions tune an adoption.
type ApplyOptions struct {
	// BackupDir receives the safety snapshot; empty skips it.
	BackupDir string
	// StopAfter ends the run with ErrStopped after the named step.
	StopAfter string
	// Log receives one line per step.
	Log io.Writer
}

type applier struct {
	env  Env
	plan *Plan
	opts ApplyOptions
}

// Apply adopts one planned cluster. The plan must have no refusals.
func Apply(ctx context.Context, env Env, p *Plan, opts ApplyOptions) error {
	if r := p.Refusals(); len(r) > 0 {
		return fmt.Errorf("refused: %v", r)
	}
	a := &applier{env: env, plan: p, opts: opts}
	for _, s := range Steps {
		if err := s.run(a, ctx); err != nil {
			return fmt.Errorf("step %s: %w", s.Name, err)
		}
		a.logf("%s/%s: %s: done", p.Live.Legacy.Namespace(), p.Live.Legacy.Name(), s.Name)
		if opts.StopAfter == s.Name {
			return ErrStopped
		}
	}
	return nil
}

func (a *applier) logf(format string, args ...any) {
	if a.opts.Log != nil {
		fmt.Fprintf(a.opts.Log, format+"\n", args...)
	}
}

func (a *applier) key(name string) client.ObjectKey {
	return client.ObjectKey{Namespace: a.plan.Live.Legacy.Namespace(), Name: name}
}

// snapshot streams the backend of one member to <dir>/<ns>_<name>_<clusterID>.db,
// through a temporary file so that a file of that name is always whole.
func (a *applier) snapshot(ctx context.Context) error {
	if a.opts.BackupDir == "" {
		return nil
	}
	lv := a.plan.Live
	path := filepath.Join(a.opts.BackupDir, fmt.Sprintf("%s_%s_%s.db", lv.Legacy.Namespace(), lv.Legacy.Name(), etcd.FormatID(lv.ClusterID)))
	if _, err := os.Stat(path); err == nil {
		a.logf("safety snapshot %s exists already", path)
		return nil
	}
	pod := a.readyPod()
	if pod == nil {
		return errors.New("no Ready member to take a snapshot from")
	}
	tmp := path + ".part"
	err := lv.withEtcd(ctx, a.env, pod, func(cl etcd.Maintenance) error {
		return saveSnapshot(ctx, cl, tmp)
	})
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	a.logf("safety snapshot of %s saved to %s", pod.Name, path)
	return nil
}

func saveSnapshot(ctx context.Context, cl etcd.Maintenance, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	rc, err := cl.Snapshot(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, rc)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n == 0 {
		err = errors.New("the snapshot is empty")
	}
	return err
}

// cluster creates the EtcdCluster and pre-fills its status. The operator is
// scaled down, so nobody reconciles the cluster between the two writes; a
// status already carrying a cluster ID is never overwritten.
func (a *applier) cluster(ctx context.Context) error {
	want := a.plan.Cluster.DeepCopy()
	want.Status = v1alpha2.EtcdClusterStatus{}
	if err := a.env.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating EtcdCluster: %w", err)
	}
	c, err := a.stored(ctx)
	if err != nil {
		return err
	}
	if c.Status.ClusterID != "" {
		return nil
	}
	patch := client.MergeFrom(c.DeepCopy())
	c.Status.ClusterID = a.plan.Cluster.Status.ClusterID
	c.Status.ClusterToken = a.plan.Cluster.Status.ClusterToken
	// The target is latched from the spec as the API server stored it
	// (with its defaults), exactly as the operator would latch it.
	c.Status.Observed = manifest.Observe(&c.Spec)
	if err := a.env.Client.Status().Patch(ctx, c, patch); err != nil {
		return fmt.Errorf("pre-filling the EtcdCluster's status: %w", err)
	}
	return nil
}

// stored reads the adopting EtcdCluster and checks it is this tool's.
func (a *applier) stored(ctx context.Context) (*v1alpha2.EtcdCluster, error) {
	c := &v1alpha2.EtcdCluster{}
	if err := a.env.Client.Get(ctx, a.key(a.plan.Cluster.Name), c); err != nil {
		return nil, fmt.Errorf("reading EtcdCluster: %w", err)
	}
	if c.Annotations[MigratedFromAnnotation] != string(a.plan.Live.Legacy.Object.GetUID()) {
		return nil, fmt.Errorf("EtcdCluster %s was not made by etcd-migrate from this legacy cluster", c.Name)
	}
	return c, nil
}

// members creates one EtcdMember per live member, owned by the cluster, and
// pre-fills the status the member controller would otherwise learn.
func (a *applier) members(ctx context.Context) error {
	c, err := a.stored(ctx)
	if err != nil {
		return err
	}
	for _, want := range a.plan.members(c) {
		status := want.Status
		want.Status = v1alpha2.EtcdMemberStatus{}
		if err := a.env.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating EtcdMember %s: %w", want.Name, err)
		}
		m := &v1alpha2.EtcdMember{}
		if err := a.env.Client.Get(ctx, a.key(want.Name), m); err != nil {
			return err
		}
		if !ownedBy(m, c.UID) {
			return fmt.Errorf("EtcdMember %s exists but belongs to another cluster", m.Name)
		}
		if m.Status.MemberID != "" {
			continue
		}
		patch := client.MergeFrom(m.DeepCopy())
		m.Status = status
		if err := a.env.Client.Status().Patch(ctx, m, patch); err != nil {
			return fmt.Errorf("pre-filling the status of EtcdMember %s: %w", m.Name, err)
		}
	}
	return nil
}

func ownedBy(obj metav1.Object, uid types.UID) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == uid
}

// retireStatefulSet deletes the StatefulSet with orphan propagation (its
// Pods stay, running) and waits until it is gone, so that it can neither
// recreate a Pod nor re-adopt one.
func (a *applier) retireStatefulSet(ctx context.Context) error {
	sts := &appsv1.StatefulSet{}
	key := a.key(a.plan.Live.Legacy.Name())
	err := a.env.Client.Get(ctx, key, sts)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if sts.DeletionTimestamp == nil {
		if err := a.env.Client.Delete(ctx, sts, client.PropagationPolicy(metav1.DeletePropagationOrphan)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting StatefulSet: %w", err)
		}
	}
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := a.env.Client.Get(ctx, key, &appsv1.StatefulSet{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// adoptPods moves each Pod and claim under its EtcdMember: the controller
// reference and the operator's labels. Nothing about the Pod's spec changes,
// so nothing restarts.
func (a *applier) adoptPods(ctx context.Context) error {
	cluster := a.plan.Cluster.Name
	for _, lm := range a.plan.Live.Members {
		m := &v1alpha2.EtcdMember{}
		if err := a.env.Client.Get(ctx, a.key(lm.Name), m); err != nil {
			return fmt.Errorf("reading EtcdMember %s: %w", lm.Name, err)
		}
		pod := &corev1.Pod{}
		if err := a.env.Client.Get(ctx, a.key(lm.Name), pod); err != nil {
			return fmt.Errorf("reading pod %s: %w", lm.Name, err)
		}
		if string(pod.UID) != m.Status.PodUID {
			return fmt.Errorf("pod %s is not the Pod the member was recorded with (UID %s, now %s): it was recreated meanwhile", pod.Name, m.Status.PodUID, pod.UID)
		}
		// The Pod runs the member's spec as adopted: the template hash says
		// so, and a roll-out then restarts it for a changed spec (even one
		// changed by a pass that died before restarting it) or, with the
		// hashes below, for changed Secrets, each under its own cause. The
		// marker keeps it known as a Pod the operator did not render.
		anns := map[string]string{
			manifest.AnnotationInitialClusterState: manifest.StateExisting,
			manifest.AnnotationTemplateHash:        manifest.TemplateHash(m),
			manifest.AnnotationAdoptedPod:          "true",
		}
		if h, err := a.secretHashes(ctx, m); err != nil {
			return err
		} else if h != "" {
			// The certificate material the Pod runs with, as the operator
			// records it on the Pods it starts: a later renewal rolls it.
			anns[manifest.AnnotationSecretHashes] = h
		}
		if err := a.handOver(ctx, pod, m, memberPodLabels(pod.Labels, cluster, m.Name, true), anns); err != nil {
			return err
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := a.env.Client.Get(ctx, a.key(manifest.PVCName(lm.Name)), pvc); err != nil {
			return fmt.Errorf("reading claim of %s: %w", lm.Name, err)
		}
		if err := a.handOver(ctx, pvc, m, memberPodLabels(pvc.Labels, cluster, m.Name, false), nil); err != nil {
			return err
		}
	}
	return nil
}

// secrets adds the planned CAs to ca.crt of the certificate Secrets. It
// reads each Secret afresh and appends only the CAs it lacks, so a re-run
// changes nothing more.
func (a *applier) secrets(ctx context.Context) error {
	bySecret := map[string][]*x509.Certificate{}
	for _, c := range a.plan.CAChanges {
		bySecret[c.Secret] = append(bySecret[c.Secret], c.CA)
	}
	for _, name := range sortedKeys(bySecret) {
		s := &corev1.Secret{}
		if err := a.env.Client.Get(ctx, a.key(name), s); err != nil {
			return fmt.Errorf("reading Secret %s: %w", name, err)
		}
		bundle := withCAs(s.Data[manifest.KeyCA], bySecret[name])
		if bytes.Equal(bundle, s.Data[manifest.KeyCA]) {
			continue
		}
		patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[manifest.KeyCA] = bundle
		if err := a.env.Client.Patch(ctx, s, patch); err != nil {
			return fmt.Errorf("adding CAs to ca.crt of Secret %s: %w", name, err)
		}
		a.logf("Secret %s: ca.crt now holds %d CA(s) more", name, len(bySecret[name]))
	}
	return nil
}

// secretHashes renders the hashes of the certificate material a member
// mounts, or "" for a member without TLS.
func (a *applier) secretHashes(ctx context.Context, m *v1alpha2.EtcdMember) (string, error) {
	uses := manifest.MountedSecrets(m)
	if len(uses) == 0 {
		return "", nil
	}
	secrets := map[string]*corev1.Secret{}
	for _, u := range uses {
		s := &corev1.Secret{}
		if err := a.env.Client.Get(ctx, a.key(u.Name), s); err != nil {
			return "", fmt.Errorf("reading Secret %s: %w", u.Name, err)
		}
		secrets[u.Name] = s
	}
	return manifest.SecretHashes(manifest.HashSecrets(uses, secrets)), nil
}

// handOver replaces obj's controller reference with the member's and adds
// labels and annotations, unless it is done already.
func (a *applier) handOver(ctx context.Context, obj client.Object, m *v1alpha2.EtcdMember, labels, annotations map[string]string) error {
	if ownedBy(obj, m.UID) && sameLabels(obj.GetLabels(), labels) {
		return nil
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	var refs []metav1.OwnerReference
	for _, r := range obj.GetOwnerReferences() {
		if r.Controller == nil || !*r.Controller {
			refs = append(refs, r)
		}
	}
	obj.SetOwnerReferences(append(refs, manifest.MemberOwner(m)))
	obj.SetLabels(labels)
	if len(annotations) > 0 {
		anns := obj.GetAnnotations()
		if anns == nil {
			anns = map[string]string{}
		}
		for k, v := range annotations {
			anns[k] = v
		}
		obj.SetAnnotations(anns)
	}
	if err := a.env.Client.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("handing %s to EtcdMember %s: %w", obj.GetName(), m.Name, err)
	}
	return nil
}

func sameLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// services gives the legacy Services the adopted members need to the new
// cluster, and deletes a ClusterIP Service named like the cluster: the
// operator's headless Service takes that name.
func (a *applier) services(ctx context.Context) error {
	c, err := a.stored(ctx)
	if err != nil {
		return err
	}
	l := a.plan.Live.Legacy
	for _, name := range []string{l.HeadlessService(), l.ClientService()} {
		svc := &corev1.Service{}
		err := a.env.Client.Get(ctx, a.key(name), svc)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return err
		case name == c.Name && svc.Spec.ClusterIP != corev1.ClusterIPNone:
			if err := a.env.Client.Delete(ctx, svc, client.Preconditions{UID: &svc.UID}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting the ClusterIP Service %s: %w", name, err)
			}
			continue
		}
		if err := a.giveService(ctx, svc, c); err != nil {
			return err
		}
	}
	return a.giveConfigMap(ctx, c)
}

// giveConfigMap keeps the legacy cluster-state ConfigMap for as long as the
// cluster lives: the adopted Pods take their environment from it, and the
// kubelet refuses to start a container whose ConfigMap is gone, so deleting
// it would turn the next crash of an adopted member into an outage of it.
// Its state is pinned to existing: the cluster formed long ago.
func (a *applier) giveConfigMap(ctx context.Context, c *v1alpha2.EtcdCluster) error {
	cm := &corev1.ConfigMap{}
	err := a.env.Client.Get(ctx, a.key(a.plan.Live.Legacy.ConfigMap()), cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	labels := memberPodLabels(cm.Labels, c.Name, "", false)
	delete(labels, manifest.LabelComponent)
	if len(cm.OwnerReferences) == 1 && cm.OwnerReferences[0].UID == c.UID && sameLabels(cm.Labels, labels) &&
		cm.Data[legacyStateKey] == manifest.StateExisting {
		return nil
	}
	patch := client.MergeFrom(cm.DeepCopy())
	cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha2.GroupVersion.String(), Kind: "EtcdCluster", Name: c.Name, UID: c.UID}}
	cm.Labels = labels
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[legacyStateKey] = manifest.StateExisting
	if err := a.env.Client.Patch(ctx, cm, patch); err != nil {
		return fmt.Errorf("handing ConfigMap %s to the EtcdCluster: %w", cm.Name, err)
	}
	return nil
}

// legacyStateKey is the ConfigMap key the legacy Pods read their initial
// cluster state from.
const legacyStateKey = "ETCD_INITIAL_CLUSTER_STATE"

// giveService makes the EtcdCluster a (non-controlling) owner of a legacy
// Service in place of the legacy cluster, and labels it as the cluster's, so
// that it goes with the cluster and its EndpointSlices reach the operator.
func (a *applier) giveService(ctx context.Context, svc *corev1.Service, c *v1alpha2.EtcdCluster) error {
	refs := []metav1.OwnerReference{{APIVersion: v1alpha2.GroupVersion.String(), Kind: "EtcdCluster", Name: c.Name, UID: c.UID}}
	labels := memberPodLabels(svc.Labels, c.Name, "", false)
	delete(labels, manifest.LabelComponent)
	if len(svc.OwnerReferences) == 1 && svc.OwnerReferences[0].UID == c.UID && sameLabels(svc.Labels, labels) {
		return nil
	}
	patch := client.MergeFrom(svc.DeepCopy())
	svc.OwnerReferences = refs
	svc.Labels = labels
	if err := a.env.Client.Patch(ctx, svc, patch); err != nil {
		return fmt.Errorf("handing Service %s to the EtcdCluster: %w", svc.Name, err)
	}
	return nil
}

// retireLegacy deletes the legacy operator's PDB (only if it made it) and
// then the legacy EtcdCluster, orphaning whatever still names it.
func (a *applier) retireLegacy(ctx context.Context) error {
	l := a.plan.Live.Legacy
	for _, obj := range []client.Object{
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: l.Name(), Namespace: l.Namespace()}},
	} {
		err := a.env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if !ownedBy(obj, l.Object.GetUID()) {
			continue
		}
		if err := a.env.Client.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s: %w", obj.GetName(), err)
		}
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(LegacyGVR.GroupVersion().WithKind("EtcdCluster"))
	u.SetNamespace(l.Namespace())
	u.SetName(l.Name())
	err := a.env.Client.Delete(ctx, u, client.PropagationPolicy(metav1.DeletePropagationOrphan), client.Preconditions{UID: ptr.To(l.Object.GetUID())})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the legacy EtcdCluster: %w", err)
	}
	// Orphaning keeps it, marked for deletion, until the garbage collector
	// has let go of its dependents: the adoption is done when it is gone.
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		err := a.env.Client.Get(ctx, client.ObjectKeyFromObject(u), got)
		if err == nil && got.GetUID() != l.Object.GetUID() {
			return true, nil // a new legacy cluster of the name: not ours
		}
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("waiting for the legacy EtcdCluster to be deleted (the garbage collector orphans its dependents first; is kube-controller-manager running?): %w", err)
	}
	return nil
}
