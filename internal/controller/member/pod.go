package member

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/conditions"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

func ownedBy(obj metav1.Object, m *v1alpha2.EtcdMember) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == m.UID
}

// initialState is "new" only for the seed of a cluster that never formed and
// whose etcd never reported a member ID: anything else joins an existing
// cluster, so a lost data directory can never bootstrap a second cluster.
func initialState(s *state) string {
	if s.member.Spec.Bootstrap && s.member.Status.MemberID == "" && s.cluster != nil && s.cluster.Status.ClusterID == "" {
		return manifest.StateNew
	}
	return manifest.StateExisting
}

// claimLost marks a member whose claim is gone (deleted, or being deleted
// with no Pod left to hold it) after it was made: its data went with it. Creating a new, empty claim
// would restart the member under its old etcd identity with no raft log,
// which can vote twice in a term; it is replaced as a new member instead.
func (r *Reconciler) claimLost(ctx context.Context, s *state) bool {
	m := s.member
	if m.Spec.Storage.Medium == v1alpha2.StorageMediumMemory {
		return false
	}
	if m.Status.PVCName == "" && s.pod == nil && m.Status.MemberID == "" {
		// Never had one: ensurePVC makes it.
		return false
	}
	pvc := &corev1.PersistentVolumeClaim{}
	key := client.ObjectKey{Namespace: m.Namespace, Name: manifest.PVCName(m.Name)}
	if err := r.Client.Get(ctx, key, pvc); err == nil && pvc.DeletionTimestamp == nil {
		return false
	}
	// The cache holds only claims labelled as the operator's; confirm with
	// the API server, so that an edited label never reads as a lost claim.
	err := r.APIReader.Get(ctx, key, pvc)
	if (err == nil && pvc.DeletionTimestamp == nil) || (err != nil && !apierrors.IsNotFound(err)) {
		return false
	}
	if err == nil && s.pod != nil && s.pod.DeletionTimestamp == nil {
		// Being deleted, but held by its Pod (the claim's protection
		// finalizer): the data is still there and etcd still runs on it.
		// The member keeps serving and voting; the cluster controller
		// replaces it, as a deleted member, before it lets it go.
		return false
	}
	markLost(s, conditions.ReasonDataDirLost, fmt.Sprintf("its PersistentVolumeClaim %s was deleted, and its data with it", manifest.PVCName(m.Name)))
	set(s, conditions.Ready, false, conditions.ReasonDataDirLost, "The data volume is gone; the member will be replaced")
	return true
}

// ensurePVC creates the member's claim and reports whether the Pod may be
// created: a claim of a class that binds immediately must be bound first,
// because a Pod with an unbound claim is rejected by the scheduler, which
// then backs off for seconds before it looks again.
func (r *Reconciler) ensurePVC(ctx context.Context, s *state) (bool, error) {
	m := s.member
	if m.Spec.Storage.Medium == v1alpha2.StorageMediumMemory {
		return true, nil
	}
	want := manifest.PVC(m)
	have := &corev1.PersistentVolumeClaim{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("creating PVC %s: %w", want.Name, err)
		}
		have = want
	case err != nil:
		return false, fmt.Errorf("reading PVC %s: %w", want.Name, err)
	case !ownedBy(have, m):
		return false, fmt.Errorf("PVC %s belongs to something else (an earlier member of that name?); waiting for it to be deleted", have.Name)
	}
	m.Status.PVCName = want.Name
	if err := r.growClaim(ctx, s, have); err != nil {
		return false, err
	}
	if s.pod != nil || have.Status.Phase == corev1.ClaimBound || r.bindsOnFirstUse(ctx, have) {
		return true, nil
	}
	r.setNotReady(s, "WaitingForVolume", fmt.Sprintf("Waiting for PVC %s to be bound", have.Name))
	return false, nil
}

// growClaim expands the claim in place to the member's storage size when its
// class allows it, and reports on it in the StorageResized condition: True
// once the claim's capacity reached the size, False while it grows or when
// the class cannot expand (the member keeps running on its current volume).
func (r *Reconciler) growClaim(ctx context.Context, s *state, pvc *corev1.PersistentVolumeClaim) error {
	want := s.member.Spec.Storage.Size
	requested := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	capacity := pvc.Status.Capacity[corev1.ResourceStorage]
	switch {
	case want.Cmp(requested) > 0 && !r.expandable(ctx, pvc):
		set(s, conditions.StorageResized, false, conditions.ReasonExpansionNotSupported,
			fmt.Sprintf("PVC %s cannot grow to %s: its StorageClass %q does not allow volume expansion; the member keeps its %s volume",
				pvc.Name, want.String(), ptr.Deref(pvc.Spec.StorageClassName, ""), requested.String()))
		return nil
	case want.Cmp(requested) > 0:
		patch := client.MergeFrom(pvc.DeepCopy())
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = want
		if err := r.Client.Patch(ctx, pvc, patch); err != nil {
			return fmt.Errorf("growing PVC %s to %s: %w", pvc.Name, want.String(), err)
		}
		r.event(s.member, false, "VolumeExpanding", "ExpandVolume", "Growing PVC %s from %s to %s", pvc.Name, requested.String(), want.String())
		set(s, conditions.StorageResized, false, conditions.ReasonResizing, fmt.Sprintf("PVC %s grows to %s", pvc.Name, want.String()))
	case pvc.Status.Phase == corev1.ClaimBound && capacity.Cmp(requested) < 0:
		set(s, conditions.StorageResized, false, conditions.ReasonResizing,
			fmt.Sprintf("PVC %s grows to %s (capacity %s)", pvc.Name, requested.String(), capacity.String()))
	case conditions.Get(s.member.Status.Conditions, conditions.StorageResized) != nil:
		// Only members that were asked to grow carry the condition.
		set(s, conditions.StorageResized, true, conditions.ReasonResized, fmt.Sprintf("PVC %s has %s", pvc.Name, capacity.String()))
	}
	return nil
}

// expandable reports whether the claim's StorageClass allows expansion.
func (r *Reconciler) expandable(ctx context.Context, pvc *corev1.PersistentVolumeClaim) bool {
	sc := &storagev1.StorageClass{}
	name := ptr.Deref(pvc.Spec.StorageClassName, "")
	if name == "" || r.Client.Get(ctx, client.ObjectKey{Name: name}, sc) != nil {
		return false
	}
	return ptr.Deref(sc.AllowVolumeExpansion, false)
}

// bindsOnFirstUse reports whether the claim's class waits for a Pod before it
// binds (or is unknown, in which case waiting could last forever).
func (r *Reconciler) bindsOnFirstUse(ctx context.Context, pvc *corev1.PersistentVolumeClaim) bool {
	name := ptr.Deref(pvc.Spec.StorageClassName, "")
	if name == "" {
		return true
	}
	sc := &storagev1.StorageClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, sc); err != nil {
		return true
	}
	return sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
}

// createPod starts the member once the Secrets it mounts exist with every
// key it reads, recording their material on the Pod (see
// manifest.AnnotationSecretHashes).
func (r *Reconciler) createPod(ctx context.Context, s *state) (ctrl.Result, error) {
	m := s.member
	hashes, problem, err := r.readSecrets(ctx, m)
	if err != nil {
		return ctrl.Result{}, err
	}
	if problem != "" {
		c := conditions.Get(m.Status.Conditions, conditions.Ready)
		if c == nil || c.Reason != conditions.ReasonSecretMissing || c.Message != problem {
			r.event(m, true, conditions.ReasonSecretMissing, "CreatePod", "%s", problem)
		}
		r.setNotReady(s, conditions.ReasonSecretMissing, problem)
		// The Secret's appearance wakes the member (membersMounting);
		// look again anyway, in case the watch missed it.
		return ctrl.Result{RequeueAfter: retrySecrets}, nil
	}
	if msg := r.restoreRefused(s); msg != "" {
		r.setNotReady(s, conditions.ReasonOperatorImageNotConfigured, msg)
		return ctrl.Result{}, nil
	}
	fromImage, why, err := r.toolsFromImage(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	pod := manifest.Pod(m, manifest.PodOptions{EtcdRepository: r.EtcdRepository, InitialClusterState: initialState(s),
		OperatorImage: r.OperatorImage, SecretHashes: hashes, ToolsFromImage: fromImage,
		ForceNewCluster: manifest.ForceAuthorized(s.cluster, m)})
	if err := r.Client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("creating pod: %w", err)
	}
	logger(ctx, m)("Created pod", "initialClusterState", pod.Annotations[manifest.AnnotationInitialClusterState],
		"toolsFromImage", fromImage, "why", why)
	r.setNotReady(s, conditions.ReasonPodNotReady, "Pod created")
	return ctrl.Result{}, nil
}

// readSecrets reads the Secrets the member mounts (through package
// secretcache: from the API server only when they changed) and returns
// their material's hashes, or what is missing: a Secret, or a key in one,
// named with what the member needs it for.
func (r *Reconciler) readSecrets(ctx context.Context, m *v1alpha2.EtcdMember) (hashes, problem string, err error) {
	uses := manifest.MountedSecrets(m)
	secrets := map[string]*corev1.Secret{}
	for _, u := range uses {
		sec, ok := secrets[u.Name]
		if !ok {
			sec = &corev1.Secret{}
			err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: u.Name}, sec)
			switch {
			case apierrors.IsNotFound(err):
				return "", fmt.Sprintf("Waiting for Secret %s (the %s), which the member mounts: it does not exist", u.Name, u.Purpose), nil
			case err != nil:
				return "", "", fmt.Errorf("reading Secret %s: %w", u.Name, err)
			}
			secrets[u.Name] = sec
		}
		if k := u.MissingKey(sec); k != "" {
			return "", fmt.Sprintf("Waiting for Secret %s (the %s) to hold the key %s, which the member reads", u.Name, u.Purpose, k), nil
		}
		if why := u.Mismatch(sec); why != "" {
			return "", fmt.Sprintf("Waiting for Secret %s (the %s): %s", u.Name, u.Purpose, why), nil
		}
	}
	return manifest.SecretHashes(manifest.HashSecrets(uses, secrets)), "", nil
}

// toolsFromImage says whether a new Pod mounts the operator's image as its
// tools volume (see manifest.PodOptions), and why: as configured, or, by
// default, when every node's kubelet and container runtime can mount it.
func (r *Reconciler) toolsFromImage(ctx context.Context) (bool, string, error) {
	switch r.ToolsVolume {
	case manifest.ToolsVolumeImage:
		return true, "configured", nil
	case manifest.ToolsVolumeCopy:
		return false, "configured", nil
	}
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes); err != nil {
		return false, "", fmt.Errorf("listing nodes: %w", err)
	}
	ok, why := manifest.ImageVolumesSupported(nodes.Items)
	if ok {
		why = "every node can mount it"
	}
	return ok, why, nil
}

// voterLabel says whether the member's Pod carries the voter label (the
// client Service routes to it, the budget counts it): a voter, once this
// Pod's etcd has answered (Version is cleared when the Pod changes). A
// member promoted before it published itself through raft has a Ready Pod
// while its client port serves nothing yet, and clients must not be sent
// there. A label already on stays (a voter's Pod is made with it, an
// adopted one came with it), a leaving member's too: its Pod's deletion
// takes it out of the Service, and a write of the Pod just before that
// deletion holds the termination up in the kubelet (see the cluster
// controller's removeFromEtcd). A leaving member never gets the label.
func voterLabel(m *v1alpha2.EtcdMember, pod *corev1.Pod) bool {
	labelled := pod.Labels[manifest.LabelRole] == manifest.RoleVoter
	switch {
	case !m.Status.IsVoter:
		return false
	case m.DeletionTimestamp != nil:
		return labelled
	}
	return m.Status.Version != "" || labelled
}

// leaving reports whether the API server has the member deleted or gone.
func (r *Reconciler) leaving(ctx context.Context, m *v1alpha2.EtcdMember) (bool, error) {
	live := &v1alpha2.EtcdMember{}
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), live)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading member %s: %w", m.Name, err)
	}
	return live.UID != m.UID || live.DeletionTimestamp != nil, nil
}

// syncPod keeps what the operator changes on a running Pod: the voter label
// the client Service and the PodDisruptionBudget select on (a voter whose
// etcd has answered since its Pod started), the initial
// cluster state the next container start reads ("existing" never goes back
// to "new"), the member ID the data guard checks against, and the restart
// count etcd last came up at.
func (r *Reconciler) syncPod(ctx context.Context, s *state) error {
	pod, m := s.pod, s.member
	labels := maps.Clone(pod.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	// The operator finds its Pods by these labels: put back any edited away.
	maps.Copy(labels, manifest.MemberLabels(m.Spec.ClusterName, m.Name))
	on := voterLabel(m, pod)
	if on && pod.Labels[manifest.LabelRole] != manifest.RoleVoter {
		// Putting the label on (a rare write: a promotion, a new Pod): the
		// cluster controller may have deleted the member while the cached
		// one does not show it yet, and a leaving member gets no label.
		// The API server has the last word.
		leaving, err := r.leaving(ctx, m)
		if err != nil {
			return err
		}
		on = !leaving
	}
	if on {
		labels[manifest.LabelRole] = manifest.RoleVoter
	} else {
		delete(labels, manifest.LabelRole)
	}
	state := initialState(s)
	if pod.Annotations[manifest.AnnotationInitialClusterState] == manifest.StateExisting {
		state = manifest.StateExisting
	}
	// The data guard reads the member ID at every start of etcd's
	// container: from the first report on, a start without the member's
	// write-ahead log is refused.
	id := pod.Annotations[manifest.AnnotationMemberID]
	if m.Status.MemberID != "" {
		id = m.Status.MemberID
	}
	// The restart count etcd last came up at: failed starts are counted
	// from it (see crashLoopMessage).
	readyAt := readyRestartsToRecord(pod)
	if maps.Equal(labels, pod.Labels) && pod.Annotations[manifest.AnnotationInitialClusterState] == state &&
		pod.Annotations[manifest.AnnotationMemberID] == id && pod.Annotations[annotationReadyRestarts] == readyAt {
		return nil
	}
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Labels = labels
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[manifest.AnnotationInitialClusterState] = state
	if id != "" {
		pod.Annotations[manifest.AnnotationMemberID] = id
	}
	if readyAt != "" {
		pod.Annotations[annotationReadyRestarts] = readyAt
	}
	if err := r.Client.Patch(ctx, pod, patch); err != nil {
		return fmt.Errorf("updating pod labels: %w", err)
	}
	return nil
}

// sleep deletes the Pod of a dormant member; its PVC and identity stay.
func (r *Reconciler) sleep(ctx context.Context, s *state) (ctrl.Result, error) {
	if s.pod != nil && s.pod.DeletionTimestamp == nil {
		if err := r.Client.Delete(ctx, s.pod); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("deleting pod of dormant member: %w", err)
		}
		r.event(s.member, false, conditions.ReasonPaused, "Pause", "Stopped the pod; the volume and member identity are kept")
	}
	st := &s.member.Status
	st.PodName, st.PodUID, st.Replicas = "", "", 0
	set(s, conditions.Ready, false, conditions.ReasonPaused, "The cluster is paused; this member is dormant")
	return ctrl.Result{}, nil
}
