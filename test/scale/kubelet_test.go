package scale

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
	"github.com/seed74754924/etcd-operator/internal/manifest"
	"github.com/seed74754924/etcd-operator/test/infra/etcd/fake"
)

// hollowKubelet runs member Pods without containers, as kwok does for any
// Pod: it binds each to a hollow node, gives it an address of its own in
// podRange, and, where a kubelet would start etcd, starts a hollow
// member of the cluster's fake etcd (fake.Hollow) on that address. The Pod
// is Running once the member runs and Ready while its /health says so; a
// joiner's Pod waits in its join gate until etcd lists it, as the real
// gate does. A deleted Pod's member stops, and the Pod goes at once.
type hollowKubelet struct {
	kube  kubernetes.Interface
	c     client.Client
	nodes []string
	queue workqueue.TypedRateLimitingInterface[string]
	pods  cache.Indexer

	mu       sync.Mutex
	clusters map[string]*fake.Hollow // by namespace/cluster
	nextIP   atomic.Uint32
	ips      map[string]string // by namespace/pod
	// seq names each cluster's fake with an ID of its own.
	seq uint64
}

const hollowNodes = 10

func newHollowKubelet(kube kubernetes.Interface, c client.Client) *hollowKubelet {
	k := &hollowKubelet{
		kube: kube, c: c, clusters: map[string]*fake.Hollow{}, ips: map[string]string{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 5*time.Second)),
	}
	for i := range hollowNodes {
		k.nodes = append(k.nodes, fmt.Sprintf("hollow-%d", i))
	}
	return k
}

// run creates the hollow nodes and serves Pods until ctx ends.
func (k *hollowKubelet) run(ctx context.Context, workers int) error {
	for _, n := range k.nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"kubernetes.io/hostname": n, "type": "hollow"}}}
		if _, err := k.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		node.Status = corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
			Capacity:   corev1.ResourceList{corev1.ResourcePods: resourceQuantity("5000")},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"},
		}
		node.Status.Allocatable = node.Status.Capacity
		if _, err := k.kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	f := informers.NewSharedInformerFactoryWithOptions(k.kube, 5*time.Second, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = manifest.LabelCluster
	}))
	inf := f.Core().V1().Pods().Informer()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	k.pods = inf.GetIndexer()
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	for range workers {
		go func() {
			for k.next(ctx) {
			}
		}()
	}
	go func() {
		<-ctx.Done()
		k.queue.ShutDown()
	}()
	return nil
}

func (k *hollowKubelet) next(ctx context.Context) bool {
	key, stop := k.queue.Get()
	if stop {
		return false
	}
	defer k.queue.Done(key)
	requeue, err := k.sync(ctx, key)
	switch {
	case err != nil:
		k.queue.AddRateLimited(key)
	case requeue:
		k.queue.AddAfter(key, time.Second)
		k.queue.Forget(key)
	default:
		k.queue.Forget(key)
	}
	return true
}

// close stops every hollow member.
func (k *hollowKubelet) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, h := range k.clusters {
		h.Close()
	}
}

// hollow is the fake etcd of the Pod's cluster.
func (k *hollowKubelet) hollow(ns, cluster string) *fake.Hollow {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := ns + "/" + cluster
	h := k.clusters[key]
	if h == nil {
		k.seq++
		h = fake.NewHollow(fake.New(0xc1a5_0000_0000+k.seq, nil))
		k.clusters[key] = h
	}
	return h
}

// ip gives the Pod an address of its own in podRange.
func (k *hollowKubelet) ip(key string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ip := k.ips[key]; ip != "" {
		return ip
	}
	n := k.nextIP.Add(1)
	ip := net.IPv4(198, byte(18+n/65536), byte(n/256), byte(n)).String()
	k.ips[key] = ip
	return ip
}

// sync brings one Pod's status to what its hollow member does; it asks to
// be called again while the Pod waits for something.
func (k *hollowKubelet) sync(ctx context.Context, key string) (bool, error) {
	obj, exists, err := k.pods.GetByKey(key)
	if err != nil {
		return false, err
	}
	ns, name, _ := strings.Cut(key, "/")
	if !exists {
		k.forget(ns, name, key)
		return false, nil
	}
	pod := obj.(*corev1.Pod)
	memberName := pod.Labels[manifest.LabelComponent]
	cluster := pod.Labels[manifest.LabelCluster]
	if memberName == "" || cluster == "" {
		return false, nil
	}
	if pod.DeletionTimestamp != nil {
		k.hollow(ns, cluster).Stop(name)
		k.forgetIP(key)
		err := k.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		return false, client.IgnoreNotFound(err)
	}
	if pod.Spec.NodeName == "" {
		node := k.nodes[int(hashOf(key))%len(k.nodes)]
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
		return false, client.IgnoreNotFound(k.kube.CoreV1().Pods(ns).Bind(ctx, b, metav1.CreateOptions{}))
	}
	m := &v1alpha2.EtcdMember{}
	if err := k.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: memberName}, m); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return k.run1(ctx, pod, m, k.hollow(ns, cluster), k.ip(key))
}

// run1 starts the Pod's member if it may start, and writes the Pod's
// status when it changed.
func (k *hollowKubelet) run1(ctx context.Context, pod *corev1.Pod, m *v1alpha2.EtcdMember, h *fake.Hollow, ip string) (bool, error) {
	hm := fake.HollowMember{Name: pod.Name, PeerURL: manifest.PeerURL(m), ClientURL: manifest.ClientURL(m), Addr: ip,
		MetricsPort: manifest.MetricsPort, Version: m.Spec.Version}
	waiting := false
	if !h.Up(pod.Name) {
		switch {
		case len(h.Cluster().Members()) == 0 && m.Spec.Bootstrap:
			if err := h.Bootstrap(hm); err != nil {
				return false, err
			}
		case h.Listed(hm.PeerURL):
			if err := h.Start(hm); err != nil {
				return false, err
			}
			h.Cluster().CatchUp(hm.PeerURL)
		default:
			// The join gate holds the container until etcd lists it.
			waiting = true
		}
	}
	ready := !waiting && h.Healthy(pod.Name)
	want := podStatus(pod, ip, waiting, ready)
	if podStatusEqual(pod.Status, want) {
		return waiting, nil
	}
	pod = pod.DeepCopy()
	pod.Status = want
	_, err := k.kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return true, nil
	}
	return waiting, err
}

func (k *hollowKubelet) forget(ns, name, key string) {
	k.mu.Lock()
	hs := make([]*fake.Hollow, 0, len(k.clusters))
	for ck, h := range k.clusters {
		if strings.HasPrefix(ck, ns+"/") {
			hs = append(hs, h)
		}
	}
	k.mu.Unlock()
	for _, h := range hs {
		h.Stop(name)
	}
	k.forgetIP(key)
}

func (k *hollowKubelet) forgetIP(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.ips, key)
}

// podStatus is what a kubelet reports for the Pod: waiting in its join
// gate, or running etcd, ready or not.
func podStatus(pod *corev1.Pod, ip string, waiting, ready bool) corev1.PodStatus {
	now := metav1.Now()
	if pod.Status.StartTime != nil {
		now = *pod.Status.StartTime
	}
	st := corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, HostIP: "127.0.0.1", StartTime: &now}
	if waiting {
		st.Phase = corev1.PodPending
	}
	st.Conditions = []corev1.PodCondition{
		podCondition(pod, corev1.PodScheduled, true, now), podCondition(pod, corev1.PodInitialized, !waiting, now),
		podCondition(pod, corev1.ContainersReady, ready, now), podCondition(pod, corev1.PodReady, ready, now),
	}
	for _, c := range pod.Spec.InitContainers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image}
		switch {
		case waiting && c.Name == manifest.JoinGateContainer:
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: now}
		case waiting:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
		default:
			cs.State.Terminated = &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: now, FinishedAt: now}
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
	}
	for _, c := range pod.Spec.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: ready && !waiting, Started: ptr.To(!waiting)}
		if waiting {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
		} else {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: now}
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	return st
}

// podCondition keeps the transition time of a condition that did not change.
func podCondition(pod *corev1.Pod, t corev1.PodConditionType, ok bool, now metav1.Time) corev1.PodCondition {
	s := corev1.ConditionFalse
	if ok {
		s = corev1.ConditionTrue
	}
	c := corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now}
	for _, old := range pod.Status.Conditions {
		if old.Type == t && old.Status == s {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	return c
}

// podStatusEqual compares what podStatus sets.
func podStatusEqual(a, b corev1.PodStatus) bool {
	if a.Phase != b.Phase || a.PodIP != b.PodIP || len(a.Conditions) != len(b.Conditions) ||
		len(a.ContainerStatuses) != len(b.ContainerStatuses) || len(a.InitContainerStatuses) != len(b.InitContainerStatuses) {
		return false
	}
	for i := range a.Conditions {
		if a.Conditions[i].Type != b.Conditions[i].Type || a.Conditions[i].Status != b.Conditions[i].Status {
			return false
		}
	}
	for i := range a.ContainerStatuses {
		if a.ContainerStatuses[i].Ready != b.ContainerStatuses[i].Ready ||
			(a.ContainerStatuses[i].State.Running == nil) != (b.ContainerStatuses[i].State.Running == nil) {
			return false
		}
	}
	return true
}

func hashOf(s string) uint32 {
	var h uint32 = 2166136261
	for i := range len(s) {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}
