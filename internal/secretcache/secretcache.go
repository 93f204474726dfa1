// Package secretcache reads Secrets without a request to the API server on
// every pass and without holding every Secret of the watched namespaces in
// memory: the manager's cache watches the Secrets' metadata only, and the
// data of the Secrets the operator actually reads is kept beside it, read
// again from the API server when the watched resourceVersion says it
// changed.
package secretcache

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Metadata is an empty Secret's metadata object, the kind the cache watches.
func Metadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// Slim is the cache's transform for the Secrets' metadata: only what the
// reader compares (the resourceVersion) and what identifies a Secret is
// worth memory. Annotations go: kubectl apply's last-applied-configuration
// holds the whole Secret, data included.
func Slim(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		m.Annotations, m.ManagedFields, m.OwnerReferences = nil, nil, nil
	}
	return obj, nil
}

// Reader is a client.Reader for controllers: a Secret comes from the data
// kept for it when the watched metadata has the same resourceVersion, and
// from the API server otherwise (first read, changed, or not in the watch
// yet). Everything else is read from the API server, as before.
type Reader struct {
	// Cached reads the Secrets' metadata from the manager's cache.
	Cached client.Reader
	// API reads past the cache.
	API client.Reader

	mu   sync.Mutex
	data map[types.NamespacedName]*corev1.Secret
}

// New returns a Reader over the manager's cache and its API reader.
func New(cached, api client.Reader) *Reader {
	return &Reader{Cached: cached, API: api, data: map[types.NamespacedName]*corev1.Secret{}}
}

// Get reads one object; see Reader.
func (r *Reader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	sec, ok := obj.(*corev1.Secret)
	if !ok {
		return r.API.Get(ctx, key, obj, opts...)
	}
	meta := Metadata()
	err := r.Cached.Get(ctx, key, meta)
	if err == nil {
		if kept := r.kept(key); kept != nil && kept.ResourceVersion == meta.ResourceVersion {
			kept.DeepCopyInto(sec)
			return nil
		}
	}
	// Not kept, changed, or not seen by the watch yet (a Secret just
	// created), or the cache failed: the API server says.
	err = r.API.Get(ctx, key, sec, opts...)
	switch {
	case err == nil:
		r.keep(key, sec)
	case apierrors.IsNotFound(err):
		r.Forget(key)
	}
	return err
}

// List lists from the API server: the controllers list no Secrets.
func (r *Reader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.API.List(ctx, list, opts...)
}

func (r *Reader) kept(key types.NamespacedName) *corev1.Secret {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.data[key]
}

func (r *Reader) keep(key types.NamespacedName, sec *corev1.Secret) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.data[key] = sec.DeepCopy()
}

// Forget drops what is kept for a Secret.
func (r *Reader) Forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.data, key)
}

// Len is how many Secrets' data is kept.
func (r *Reader) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.data)
}

// ForgetDeleted drops the data of a Secret when the watch sees it deleted,
// so that what is kept does not outlive the Secrets.
func (r *Reader) ForgetDeleted(ctx context.Context, c cache.Cache) error {
	inf, err := c.GetInformer(ctx, Metadata())
	if err != nil {
		return err
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if o, ok := obj.(client.Object); ok {
				r.Forget(client.ObjectKeyFromObject(o))
			}
		},
	})
	return err
}
