package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// Requests counts the API requests the controllers make themselves, by verb
// and kind: writes through the manager's client, and reads that bypass the
// cache. Leader election uses a client of its own and is not counted here,
// so "the operator writes nothing at steady state" can be measured exactly.
type Requests struct {
	writes, reads *prometheus.CounterVec
	// all counts every request of the process at its transport, leader
	// election included (see Transport): what the API server sees.
	all *prometheus.CounterVec
}

// NewRequests creates the counters and registers them.
func NewRequests(reg prometheus.Registerer) *Requests {
	r := &Requests{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "etcd_operator", Name: "api_writes_total",
			Help: "API writes the controllers made, by verb and kind (leader election not included).",
		}, []string{"verb", "kind"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "etcd_operator", Name: "api_uncached_reads_total",
			Help: "API reads the controllers made past the cache, by verb and kind.",
		}, []string{"verb", "kind"}),
		all: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "etcd_operator", Name: "api_requests_total",
			Help: "Every request the operator's process sent to the API server (caches, leader election, discovery and reviews included), by verb and resource.",
		}, []string{"verb", "resource"}),
	}
	reg.MustRegister(r.writes, r.reads, r.all)
	return r
}

func (r *Requests) count(vec *prometheus.CounterVec, verb string, scheme *runtime.Scheme, obj runtime.Object) {
	kind := "unknown"
	if gvk, err := apiutil.GVKForObject(obj, scheme); err == nil {
		kind = gvk.Kind
	}
	vec.WithLabelValues(verb, kind).Inc()
}

// Client counts the writes made through c.
func (r *Requests) Client(c client.WithWatch) client.WithWatch {
	if r == nil {
		return c
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			r.count(r.writes, "create", c.Scheme(), obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			r.count(r.writes, "update", c.Scheme(), obj)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			r.count(r.writes, "patch", c.Scheme(), obj)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			r.count(r.writes, "delete", c.Scheme(), obj)
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			r.count(r.writes, "update-"+sub, c.Scheme(), obj)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			r.count(r.writes, "patch-"+sub, c.Scheme(), obj)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
}

// Reader counts the reads made through rd, which goes to the API server.
func (r *Requests) Reader(rd client.Reader, scheme *runtime.Scheme) client.Reader {
	if r == nil {
		return rd
	}
	return &countingReader{Reader: rd, r: r, scheme: scheme}
}

type countingReader struct {
	client.Reader
	r      *Requests
	scheme *runtime.Scheme
}

func (cr *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	cr.r.count(cr.r.reads, "get", cr.scheme, obj)
	return cr.Reader.Get(ctx, key, obj, opts...)
}

func (cr *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	cr.r.count(cr.r.reads, "list", cr.scheme, list)
	return cr.Reader.List(ctx, list, opts...)
}
