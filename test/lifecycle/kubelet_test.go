package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/dataguard"
	"github.com/seed74754924/etcd-operator/internal/etcd"
	"github.com/seed74754924/etcd-operator/internal/manifest"
)

// The kubelet stand-in: a scheduler that places each Pod on a node that is
// up (round robin), and per node a kubelet that starts the Pod's etcd in the
// fake cluster the way the flags ask, restarts it when it stops, reports
// readiness as etcd's health endpoint would (running and seeing a leader),
// and reports a container that exits with the reason etcd gives when its
// data directory was lost. A stopped node reports nothing: its Pods keep
// their last status, as on a dead machine.

// lostDataExit is what etcd prints before it exits on an empty data
// directory under a known member ID.
const lostDataExit = "panic: tocommit(42) is out of range [lastIndex(0)]. Was the raft log corrupted, truncated, or lost?"

func (h *harness) createNode(name string) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	if err := h.raw.Create(context.Background(), n); err != nil {
		h.t.Fatal(err)
	}
	h.setNodeReady(name, corev1.ConditionTrue)
}

func (h *harness) setNodeReady(name string, status corev1.ConditionStatus) {
	n := &corev1.Node{}
	if err := h.raw.Get(context.Background(), types.NamespacedName{Name: name}, n); err != nil {
		h.t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(h.clock.Now())}}
	if err := h.raw.Status().Update(context.Background(), n); err != nil {
		h.t.Fatal(err)
	}
}

// stopNode takes a node down: its etcd processes stop, its kubelet stops
// reporting, and the node turns NotReady.
func (h *harness) stopNode(name string) {
	h.downNodes[name] = true
	for pod, node := range h.nodes {
		if node == name {
			if m := h.memberNamed(pod); m != nil {
				h.etcd.Stop(manifest.PeerURL(m))
			}
		}
	}
	h.setNodeReady(name, corev1.ConditionUnknown)
}

// wipe empties a member's data directory and kills its etcd; the kubelet's
// restart then meets the empty directory.
func (h *harness) wipe(member string) {
	m := h.memberNamed(member)
	h.wiped[member] = true
	h.wipedUnder[member] = h.etcd.Leader()
	h.etcd.Stop(manifest.PeerURL(m))
}

// damage is what is wrong with a member's data directory beyond a wipe:
// etcd exits at every start saying etcdSays; guardSees when the data guard
// recognises it (and refuses before etcd starts).
type damage struct {
	etcdSays  string
	guardSees bool
}

// damageData damages a member's data directory (kept across its Pods, on
// its claim) and kills its etcd; the kubelet's restarts meet the damage.
func (h *harness) damageData(member string, d damage) {
	if h.damaged == nil {
		h.damaged = map[string]damage{}
	}
	h.damaged[member] = d
	h.etcd.Stop(manifest.PeerURL(h.memberNamed(member)))
}

// damagedStart says whether a damaged data directory keeps the Pod's etcd
// from starting, and records why.
func (h *harness) damagedStart(p *corev1.Pod, peer string) bool {
	d, ok := h.damaged[p.Name]
	if !ok || !h.startedBefore(peer) {
		return false
	}
	h.startErrors[p.Name] = d.etcdSays
	if d.guardSees && h.guardRefuses(p) {
		h.startErrors[p.Name] = "guard-data: " + dataguard.RefusalDamaged + " (member/snap/db (the backend database) is missing)"
	}
	return true
}

func (h *harness) kubelet() {
	ctx := context.Background()
	pods := &corev1.PodList{}
	_ = h.raw.List(ctx, pods)
	for i := range pods.Items {
		p := &pods.Items[i]
		if h.podsSeen[p.Name] == nil {
			h.podsSeen[p.Name] = map[types.UID]bool{}
		}
		h.podsSeen[p.Name][p.UID] = true
		if !h.schedule(p) || h.downNodes[p.Spec.NodeName] {
			continue
		}
		before := p.Status.DeepCopy()
		h.runPod(p)
		if !equalStatus(before, &p.Status) {
			if err := h.raw.Status().Update(ctx, p); err != nil {
				h.t.Logf("kubelet: %v", err)
			}
		}
	}
}

// schedule binds a Pod to a node that is up and not cordoned, unless its
// required node affinity matches no node (the stand-in's nodes have no
// labels to match). Like the scheduler scoring the members' preferred
// anti-affinity, it takes a node without a Pod of the same cluster when
// there is one.
func (h *harness) schedule(p *corev1.Pod) bool {
	if p.Spec.NodeName != "" {
		return true
	}
	if unschedulable(p) {
		setPodCondition(p, corev1.PodScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable)
		_ = h.raw.Status().Update(context.Background(), p)
		return false
	}
	node := h.pickNode(p)
	if node == "" {
		return false
	}
	p.Spec.NodeName = node
	if err := h.raw.Update(context.Background(), p); err != nil {
		h.t.Fatalf("binding %s: %v", p.Name, err)
	}
	h.nodes[p.Name] = node
	h.ips++
	p.Status.PodIP = fmt.Sprintf("10.0.%d.%d", h.ips/250, h.ips%250+1)
	setPodCondition(p, corev1.PodScheduled, corev1.ConditionTrue, "")
	return true
}

// pickNode is the next node round the ring that is up and not cordoned,
// one without a Pod of p's cluster first.
func (h *harness) pickNode(p *corev1.Pod) string {
	taken := map[string]bool{}
	list := &corev1.PodList{}
	_ = h.raw.List(context.Background(), list, client.MatchingLabels{manifest.LabelCluster: p.Labels[manifest.LabelCluster]})
	for _, o := range list.Items {
		taken[o.Spec.NodeName] = true
	}
	fallback := ""
	for range nodeNames {
		node := nodeNames[h.nextNode%len(nodeNames)]
		h.nextNode++
		switch {
		case h.downNodes[node] || h.cordoned[node]:
		case !taken[node]:
			return node
		case fallback == "":
			fallback = node
		}
	}
	return fallback
}

// runPod starts or observes the Pod's etcd and sets its status. A join gate
// (init container) holds etcd until the fake etcd lists the member.
func (h *harness) runPod(p *corev1.Pod) {
	flags := etcdFlags(p)
	peer := flags["--initial-advertise-peer-urls"]
	if gated(p) && !h.hasPeer(peer) {
		p.Status.Phase = corev1.PodPending
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: manifest.JoinGateContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		setPodCondition(p, corev1.PodReady, corev1.ConditionFalse, "")
		return
	}
	p.Status.InitContainerStatuses = nil
	if h.restoreFails != "" && restores(p) && strings.Contains(restoreSource(h.memberNamed(p.Name)), h.restoreFails) {
		// The restore agent fails, as on a snapshot etcdutl refuses; the
		// kubelet retries the init container in back-off.
		p.Status.Phase = corev1.PodPending
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: manifest.RestoreContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "the snapshot file is damaged"}}}}
		setPodCondition(p, corev1.PodReady, corev1.ConditionFalse, "")
		return
	}
	running, hasLeader := h.etcd.Running(peer)
	if secret := h.missingSecret(p); !running && secret != "" {
		// The kubelet cannot mount it: the Pod waits, as a real one does.
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: manifest.EtcdContainer,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: "secret " + secret + " not found"}}}}
		setPodCondition(p, corev1.PodReady, corev1.ConditionFalse, "")
		return
	}
	p.Status.Phase = corev1.PodRunning
	if !running && !h.broken[p.Name] && !h.breakAll {
		running = h.startEtcd(p, flags)
		hasLeader = false
	} else if running {
		h.etcd.CatchUp(peer)
	}
	cs := corev1.ContainerStatus{Name: manifest.EtcdContainer, Ready: running && h.probe(p, hasLeader)}
	startedAt := metav1.NewTime(h.clock.Now())
	if len(p.Status.ContainerStatuses) == 1 {
		prev := p.Status.ContainerStatuses[0]
		cs.RestartCount, cs.LastTerminationState = prev.RestartCount, prev.LastTerminationState
		if prev.State.Running != nil {
			startedAt = prev.State.Running.StartedAt
		}
	}
	switch {
	case running:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: startedAt}
		delete(h.startErrors, p.Name)
	case h.startErrors[p.Name] != "":
		cs.RestartCount++
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
		cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: h.startErrors[p.Name]}
	case h.wiped[p.Name]:
		cs.RestartCount++
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
		cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error", Message: lostDataExit}
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	ready := corev1.ConditionFalse
	if cs.Ready {
		ready = corev1.ConditionTrue
	}
	setPodCondition(p, corev1.PodReady, ready, "")
}

// probe answers the Pod's readiness probe as etcd's /health does: every
// alarm not excluded fails it; without serializable=true it needs a leader
// (and a linearizable read, which a member with a leader gets in the fake);
// with it, etcd skips the leader check and reads locally.
func (h *harness) probe(p *corev1.Pod, hasLeader bool) bool {
	if h.probeFails[p.Name] {
		return false
	}
	rp := p.Spec.Containers[0].ReadinessProbe
	if rp == nil || rp.HTTPGet == nil {
		return hasLeader
	}
	u, err := url.Parse(rp.HTTPGet.Path)
	if err != nil || u.Path != "/health" {
		h.t.Errorf("pod %s: the stand-in kubelet knows no readiness path %q", p.Name, rp.HTTPGet.Path)
		return false
	}
	q := u.Query()
	for _, a := range h.etcd.Alarms() {
		if !slices.Contains(q["exclude"], a) {
			return false
		}
	}
	return q.Get("serializable") == "true" || hasLeader
}

// missingSecret names a Secret the Pod mounts that does not exist.
func (h *harness) missingSecret(p *corev1.Pod) string {
	for _, v := range p.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		if err := h.raw.Get(context.Background(), types.NamespacedName{Namespace: p.Namespace, Name: v.Secret.SecretName}, &corev1.Secret{}); err != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}

// startEtcd starts the Pod's etcd as etcd would: bootstrap with "new" (a
// test failure once the cluster has formed: that would be a second
// cluster), join with "existing"; an emptied data directory under a member
// that had started makes etcd exit.
func (h *harness) startEtcd(p *corev1.Pod, flags map[string]string) bool {
	name, peer, clientURL := flags["--name"], flags["--initial-advertise-peer-urls"], flags["--advertise-client-urls"]
	_, version, _ := strings.Cut(p.Spec.Containers[0].Image, ":v")
	if p.Annotations[manifest.AnnotationInitialClusterState] == manifest.StateNew {
		return h.bootstrapEtcd(p, name, peer, clientURL, version)
	}
	if !h.joinStarts(p, flags) {
		return false
	}
	start := h.etcd.StartVersion
	if envValue(p, "ETCD_FORCE_NEW_CLUSTER") == "true" {
		h.forced[p.Name]++
		start = h.etcd.ForceNewCluster
	}
	if err := start(peer, name, clientURL, version); err != nil {
		// etcd exited before it wrote its log: nothing is marked.
		h.startErrors[p.Name] = err.Error()
		return false
	}
	if guarded(p) {
		// etcd wrote its log; the guard, watching, marks it.
		h.guardSawLog[p.UID] = true
	}
	if flags["--snapshot-count"] == "1" {
		h.etcd.Snapshot(peer)
	}
	return true
}

// bootstrapEtcd starts the seed of a new cluster, or of one rebuilt from a
// snapshot.
func (h *harness) bootstrapEtcd(p *corev1.Pod, name, peer, clientURL, version string) bool {
	if restores(p) && len(h.etcd.Members()) > 0 {
		// The restore agent wrote a data directory of a new cluster from
		// the snapshot.
		if err := h.etcd.Rebuild(h.etcd.ClusterID() + 1); err != nil {
			h.t.Errorf("pod %s restores a snapshot: %v", p.Name, err)
			return false
		}
	}
	if len(h.etcd.Members()) > 0 {
		h.t.Errorf("pod %s starts etcd with --initial-cluster-state=new in a cluster that has formed", p.Name)
		return false
	}
	h.etcd.BootstrapVersion(name, peer, clientURL, version)
	return true
}

// joinStarts says whether a joining (or rejoining) member's etcd gets past
// the data guard and its own checks of the data directory.
func (h *harness) joinStarts(p *corev1.Pod, flags map[string]string) bool {
	name, peer := flags["--name"], flags["--initial-advertise-peer-urls"]
	if h.damagedStart(p, peer) {
		return false
	}
	if h.freshVolume(p) && h.startedBefore(peer) {
		// A member that ran keeps its raft log on its volume; a fresh one
		// under its old identity is raft's empty-disk hazard.
		h.t.Errorf("pod %s starts member %s on a new, empty volume under the identity it had before", p.Name, name)
		h.wiped[p.Name] = true
	}
	// etcd wrote its log at a start that succeeded; a wipe took it.
	hasLog := h.startedBefore(peer) && !h.wiped[p.Name]
	if !hasLog && h.guardRefuses(p) {
		h.startErrors[p.Name] = dataguard.Refusal + " (member/wal holds no .wal file)"
		return false
	}
	if !h.startedBefore(peer) && h.failedJoins[p.Name] < h.failFirstJoins {
		h.failedJoins[p.Name]++
		h.startErrors[p.Name] = "cannot fetch cluster info from peer urls: could not retrieve cluster information from the given URLs"
		return false
	}
	if h.wiped[p.Name] && h.startedBefore(peer) {
		if !h.etcdLetsItRejoin(p, flags) {
			// etcd finds its peers ahead of its empty log and exits.
			return false
		}
		// etcd starts empty, receives the leader's snapshot and serves as
		// the member it was, having forgotten its votes.
		h.t.Errorf("pod %s: member %s rejoined etcd under its old member ID on an empty data directory (raft's empty-disk hazard)", p.Name, name)
	}
	delete(h.wiped, p.Name)
	if guarded(p) && hasLog {
		// The guard found the log at the start: it marks that in its
		// state directory.
		h.guardSawLog[p.UID] = true
	}
	return true
}

// guardRefuses: etcd starts through the data guard, and the Pod carries the
// member ID the guard checks the data directory against, or the guard has a
// state directory in which a start in this Pod marked the log it found.
func (h *harness) guardRefuses(p *corev1.Pod) bool {
	if !guarded(p) {
		return false
	}
	return p.Annotations[manifest.AnnotationMemberID] != "" || (envValue(p, dataguard.EnvStateDir) != "" && h.guardSawLog[p.UID])
}

func guarded(p *corev1.Pod) bool {
	cmd := p.Spec.Containers[0].Command
	return len(cmd) > 1 && cmd[1] == "guard-data"
}

// etcdLetsItRejoin says whether etcd, started on an empty data directory
// under a member ID it had, would come back as that member: when the leader
// changed while it was down (the new leader has no match index for it and
// sends it a snapshot), or when it is the newest member (its initial
// cluster is the whole membership, so it finds nothing amiss).
func (h *harness) etcdLetsItRejoin(p *corev1.Pod, flags map[string]string) bool {
	if h.etcd.Leader() != 0 && h.etcd.Leader() != h.wipedUnder[p.Name] {
		return true
	}
	return len(strings.Split(flags["--initial-cluster"], ",")) == len(h.etcd.Members())
}

// freshVolume reports whether the Pod's data claim is another one than the
// member's etcd first started on, and records the first one.
func (h *harness) freshVolume(p *corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := h.raw.Get(context.Background(), types.NamespacedName{Namespace: p.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc); err != nil {
			return false
		}
		first, seen := h.volumes[p.Name]
		if !seen {
			h.volumes[p.Name] = pvc.UID
			return false
		}
		return first != pvc.UID
	}
	return false
}

func gated(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == manifest.JoinGateContainer })
}

func (h *harness) hasPeer(peer string) bool {
	return slices.ContainsFunc(h.etcd.Members(), func(m etcd.Member) bool { return slices.Contains(m.PeerURLs, peer) })
}

// publishEndpoints stands in for the EndpointSlice controller: every
// headless Service gets one slice with the addresses of the Pods it selects
// (not ready ones too, as publishNotReadyAddresses asks), labelled like the
// Service.
func (h *harness) publishEndpoints() {
	ctx := context.Background()
	svcs := &corev1.ServiceList{}
	_ = h.raw.List(ctx, svcs)
	for _, svc := range svcs.Items {
		if svc.Spec.ClusterIP != corev1.ClusterIPNone {
			continue
		}
		pods := &corev1.PodList{}
		_ = h.raw.List(ctx, pods, client.InNamespace(svc.Namespace), client.MatchingLabels(svc.Spec.Selector))
		slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name}, AddressType: discoveryv1.AddressTypeIPv4}
		slice.Labels = maps.Clone(svc.Labels)
		slice.Labels[discoveryv1.LabelServiceName] = svc.Name
		for _, p := range pods.Items {
			if p.Status.PodIP != "" {
				slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.Status.PodIP}})
			}
		}
		if err := h.raw.Create(ctx, slice); apierrors.IsAlreadyExists(err) {
			have := &discoveryv1.EndpointSlice{}
			_ = h.raw.Get(ctx, client.ObjectKeyFromObject(slice), have)
			have.Endpoints, have.Labels = slice.Endpoints, slice.Labels
			_ = h.raw.Update(ctx, have)
		}
	}
}

// startedBefore reports whether etcd knows the member by name: it ran, so
// its data directory held its raft log.
func (h *harness) startedBefore(peer string) bool {
	for _, m := range h.etcd.Members() {
		if slices.Contains(m.PeerURLs, peer) {
			return m.Name != ""
		}
	}
	return false
}

// envValue resolves an environment variable of the etcd container as the
// kubelet does at the container's start: a literal value, or a Pod
// annotation through the downward API.
func envValue(p *corev1.Pod, name string) string {
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name != name {
			continue
		}
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			return e.Value
		}
		path := e.ValueFrom.FieldRef.FieldPath
		if key, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
			return p.Annotations[strings.TrimSuffix(key, "']")]
		}
	}
	return ""
}

func etcdFlags(p *corev1.Pod) map[string]string {
	flags := map[string]string{}
	for _, a := range p.Spec.Containers[0].Command {
		if k, v, ok := strings.Cut(a, "="); ok {
			flags[k] = v
		}
	}
	return flags
}

func setPodCondition(p *corev1.Pod, typ corev1.PodConditionType, status corev1.ConditionStatus, reason string) {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			p.Status.Conditions[i].Status, p.Status.Conditions[i].Reason = status, reason
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: typ, Status: status, Reason: reason})
}

func equalStatus(a, b *corev1.PodStatus) bool {
	return a.Phase == b.Phase && slices.EqualFunc(a.Conditions, b.Conditions, func(x, y corev1.PodCondition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason
	}) && slices.EqualFunc(a.ContainerStatuses, b.ContainerStatuses, func(x, y corev1.ContainerStatus) bool {
		return x.Ready == y.Ready && x.RestartCount == y.RestartCount &&
			(x.State.Running != nil) == (y.State.Running != nil) &&
			(x.LastTerminationState.Terminated != nil) == (y.LastTerminationState.Terminated != nil)
	})
}

// collectGarbage deletes what owner references would: Pods and PVCs of gone
// members, members of gone clusters; the etcd of a Pod that is gone stops.
func (h *harness) collectGarbage() {
	ctx := context.Background()
	members := &v1alpha2.EtcdMemberList{}
	_ = h.raw.List(ctx, members)
	alive := map[types.UID]bool{}
	for _, m := range members.Items {
		alive[m.UID] = true
	}
	pods := &corev1.PodList{}
	_ = h.raw.List(ctx, pods)
	running := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if ref := metav1.GetControllerOf(p); ref != nil && !alive[ref.UID] {
			_ = h.raw.Delete(ctx, p)
			continue
		}
		running[etcdFlags(p)["--initial-advertise-peer-urls"]] = true
	}
	pvcs := &corev1.PersistentVolumeClaimList{}
	_ = h.raw.List(ctx, pvcs)
	for i := range pvcs.Items {
		if ref := metav1.GetControllerOf(&pvcs.Items[i]); ref != nil && !alive[ref.UID] {
			_ = h.raw.Delete(ctx, &pvcs.Items[i])
		}
	}
	for _, m := range h.etcd.Members() {
		if len(m.PeerURLs) > 0 && !running[m.PeerURLs[0]] {
			h.etcd.Stop(m.PeerURLs[0])
		}
	}
}

// unschedulable: the stand-in's nodes have no labels, so a required node
// affinity never matches.
func unschedulable(p *corev1.Pod) bool {
	a := p.Spec.Affinity
	return a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil
}

// incarnations counts the Pods each member name had.
func (h *harness) incarnations() map[string]int {
	out := map[string]int{}
	for name, uids := range h.podsSeen {
		out[name] = len(uids)
	}
	return out
}

// deletePod deletes a Pod as a user would.
func (h *harness) deletePod(name string) {
	h.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := h.raw.Delete(context.Background(), p); err != nil {
		h.t.Fatal(err)
	}
	delete(h.nodes, name)
}

func (h *harness) pods() []string {
	list := &corev1.PodList{}
	_ = h.raw.List(context.Background(), list)
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Name)
	}
	return out
}

// restores reports whether the Pod restores a snapshot before etcd starts.
func restores(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == manifest.RestoreContainer })
}

// restoreSource renders what a member restores from, for matching.
func restoreSource(m *v1alpha2.EtcdMember) string {
	if m == nil || m.Spec.Restore == nil {
		return ""
	}
	b, _ := json.Marshal(m.Spec.Restore)
	return string(b)
}

// cordon marks nodes unschedulable (or schedulable again), on the Node as
// kubectl cordon does, for the operator to see, and for the stand-in
// scheduler.
func (h *harness) cordon(on bool, nodes ...string) {
	for _, name := range nodes {
		n := &corev1.Node{}
		if err := h.raw.Get(context.Background(), types.NamespacedName{Name: name}, n); err != nil {
			h.t.Fatal(err)
		}
		n.Spec.Unschedulable = on
		if err := h.raw.Update(context.Background(), n); err != nil {
			h.t.Fatal(err)
		}
		h.cordoned[name] = on
	}
}
