// Package storage provisions PersistentVolumes as directories under
// D/volumes for two StorageClasses: sandbox-shared (the default; any node
// reaches it, like network storage) and sandbox-local (pinned to the node
// the scheduler picked, like a local disk). Both can be expanded; released
// volumes are deleted with their directory.
package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Names of the classes and of the provisioner.
const (
	SharedClass     = "sandbox-shared"
	LocalClass      = "sandbox-local"
	ProvisionerName = "sandbox.etcd-operator.dev/directory"
	selectedNode    = "volume.kubernetes.io/selected-node"
	provisionedBy   = "pv.kubernetes.io/provisioned-by"
)

// Provisioner watches claims and volumes through the daemon's informers.
type Provisioner struct {
	Client kubernetes.Interface
	PVCs   corelisters.PersistentVolumeClaimLister
	PVs    corelisters.PersistentVolumeLister
	Dir    string // D/volumes

	queue workqueue.TypedRateLimitingInterface[string]
}

// Classes are the StorageClasses the sandbox creates.
func Classes() []*storagev1.StorageClass {
	expand := true
	del := corev1.PersistentVolumeReclaimDelete
	immediate := storagev1.VolumeBindingImmediate
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	return []*storagev1.StorageClass{
		{
			ObjectMeta: metav1.ObjectMeta{Name: SharedClass, Annotations: map[string]string{
				"storageclass.kubernetes.io/is-default-class": "true",
			}},
			Provisioner: ProvisionerName, ReclaimPolicy: &del, VolumeBindingMode: &immediate, AllowVolumeExpansion: &expand,
		},
		{
			ObjectMeta:  metav1.ObjectMeta{Name: LocalClass},
			Provisioner: ProvisionerName, ReclaimPolicy: &del, VolumeBindingMode: &wffc, AllowVolumeExpansion: &expand,
		},
	}
}

// EnsureClasses creates the StorageClasses.
func (p *Provisioner) EnsureClasses(ctx context.Context) error {
	for _, sc := range Classes() {
		_, err := p.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating StorageClass %s: %w", sc.Name, err)
		}
	}
	return nil
}

// ClaimChanged queues a claim ("ns/name").
func (p *Provisioner) ClaimChanged(key string) { p.queue.Add("pvc:" + key) }

// VolumeChanged queues a volume.
func (p *Provisioner) VolumeChanged(name string) { p.queue.Add("pv:" + name) }

// Init prepares the queue; call before registering event handlers.
func (p *Provisioner) Init() {
	p.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
}

// Run processes the queue until ctx ends.
func (p *Provisioner) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	for {
		key, quit := p.queue.Get()
		if quit {
			return
		}
		err := p.sync(ctx, key)
		if err != nil {
			slog.Warn("Storage provisioning step failed; retrying", "key", key, "err", err)
			p.queue.AddRateLimited(key)
		} else {
			p.queue.Forget(key)
		}
		p.queue.Done(key)
	}
}

func (p *Provisioner) sync(ctx context.Context, key string) error {
	if name, ok := strings.CutPrefix(key, "pv:"); ok {
		return p.syncVolume(ctx, name)
	}
	ns, claim, _ := strings.Cut(strings.TrimPrefix(key, "pvc:"), "/")
	pvc, err := p.PVCs.PersistentVolumeClaims(ns).Get(claim)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !ours(pvc.Spec.StorageClassName) {
		return nil
	}
	if pvc.Spec.VolumeName == "" {
		return p.provision(ctx, pvc)
	}
	return p.expand(ctx, pvc)
}

func ours(class *string) bool {
	return class != nil && (*class == SharedClass || *class == LocalClass)
}

// provision creates the directory and a PV pre-bound to the claim; the
// PV controller then binds the pair.
func (p *Provisioner) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	node := ""
	if *pvc.Spec.StorageClassName == LocalClass {
		node = pvc.Annotations[selectedNode]
		if node == "" {
			return nil // WaitForFirstConsumer: the scheduler has not picked a node yet
		}
	}
	pv := BuildVolume(pvc, p.Dir, node)
	path := VolumePath(pv)
	if err := os.MkdirAll(path, 0o777); err != nil {
		return err
	}
	// World-writable like common directory provisioners, so a non-root
	// Pod without fsGroup can still use its volume.
	if err := os.Chmod(path, 0o777); err != nil {
		return err
	}
	_, err := p.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// BuildVolume is the PV for a claim: a hostPath for the shared class, a
// local volume with node affinity for the local one.
func BuildVolume(pvc *corev1.PersistentVolumeClaim, dir, node string) *corev1.PersistentVolume {
	name := "pvc-" + string(pvc.UID)
	path := filepath.Join(dir, name)
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{provisionedBy: ProvisionerName}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              *pvc.Spec.StorageClassName,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
		},
	}
	mode := corev1.PersistentVolumeFilesystem
	pv.Spec.VolumeMode = &mode
	if node == "" {
		t := corev1.HostPathDirectoryOrCreate
		pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: path, Type: &t}
		return pv
	}
	pv.Spec.Local = &corev1.LocalVolumeSource{Path: path}
	pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
		}}}},
	}}
	return pv
}

// VolumePath is the directory behind a PV the provisioner made.
func VolumePath(pv *corev1.PersistentVolume) string {
	switch {
	case pv.Spec.HostPath != nil:
		return pv.Spec.HostPath.Path
	case pv.Spec.Local != nil:
		return pv.Spec.Local.Path
	}
	return ""
}

// expand grows the PV and then the claim's reported capacity; a directory
// has no size of its own.
func (p *Provisioner) expand(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	want := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	have := pvc.Status.Capacity[corev1.ResourceStorage]
	if pvc.Status.Phase != corev1.ClaimBound || want.Cmp(have) <= 0 {
		return nil
	}
	pv, err := p.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pv.Annotations[provisionedBy] != ProvisionerName {
		return nil
	}
	if cur := pv.Spec.Capacity[corev1.ResourceStorage]; want.Cmp(cur) > 0 {
		pv.Spec.Capacity[corev1.ResourceStorage] = want
		if _, err := p.Client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	cp := pvc.DeepCopy()
	cp.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: want}
	cp.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: want}
	cp.Status.AllocatedResourceStatuses = nil
	cp.Status.Conditions = nil
	_, err = p.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
	return err
}

// syncVolume deletes a released volume of ours and removes the directory
// of one that is gone.
func (p *Provisioner) syncVolume(ctx context.Context, name string) error {
	pv, err := p.PVs.Get(name)
	if apierrors.IsNotFound(err) {
		return p.removeDir(name)
	}
	if err != nil {
		return err
	}
	if pv.Annotations[provisionedBy] != ProvisionerName || pv.Status.Phase != corev1.VolumeReleased ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return nil
	}
	if err := os.RemoveAll(VolumePath(pv)); err != nil {
		return err
	}
	err = p.Client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (p *Provisioner) removeDir(pvName string) error {
	path := filepath.Join(p.Dir, pvName)
	if filepath.Dir(path) != filepath.Clean(p.Dir) {
		return nil
	}
	return os.RemoveAll(path)
}

// Wipe empties the directory of a claim's volume, whether a Pod uses it or
// not.
func (p *Provisioner) Wipe(ctx context.Context, ns, claim string) error {
	pvc, err := p.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pvc.Spec.VolumeName == "" {
		return fmt.Errorf("persistentvolumeclaim %s/%s is not bound", ns, claim)
	}
	pv, err := p.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	path := VolumePath(pv)
	if path == "" {
		return errors.New("volume has no directory")
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(path, e.Name())); err != nil {
			return err
		}
	}
	slog.Info("Wiped a volume", "claim", ns+"/"+claim, "path", path, "at", time.Now())
	return nil
}

// Start creates the classes and runs a provisioner for dir until ctx ends,
// fed by informers of its own; the sandbox's daemon and the integration
// tier's nodes (package procnode) provision the same way.
func Start(ctx context.Context, client kubernetes.Interface, dir string) (*Provisioner, error) {
	f := informers.NewSharedInformerFactory(client, 0)
	pvcs, pvs := f.Core().V1().PersistentVolumeClaims(), f.Core().V1().PersistentVolumes()
	p := &Provisioner{Client: client, PVCs: pvcs.Lister(), PVs: pvs.Lister(), Dir: dir}
	p.Init()
	if err := p.EnsureClasses(ctx); err != nil {
		return nil, err
	}
	key := func(obj any) string {
		k, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		return k
	}
	_, _ = pvcs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.ClaimChanged(key(obj)) },
		UpdateFunc: func(_, obj any) { p.ClaimChanged(key(obj)) },
	})
	_, _ = pvs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.VolumeChanged(key(obj)) },
		UpdateFunc: func(_, obj any) { p.VolumeChanged(key(obj)) },
		DeleteFunc: func(obj any) { p.VolumeChanged(key(obj)) },
	})
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	go p.Run(ctx)
	return p, nil
}
