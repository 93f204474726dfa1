package cluster

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

func TestMemoryStorageWarning(t *testing.T) {
	memory := func(size string, quota *int64) *v1alpha2.ObservedClusterSpec {
		o := &v1alpha2.ObservedClusterSpec{Storage: v1alpha2.StorageSpec{Medium: v1alpha2.StorageMediumMemory, Size: resource.MustParse(size)}}
		if quota != nil {
			o.Options = &v1alpha2.EtcdOptions{QuotaBackendBytes: quota}
		}
		return o
	}
	cases := []struct {
		name string
		spec *v1alpha2.ObservedClusterSpec
		want string
	}{
		{"PVC storage is not checked", &v1alpha2.ObservedClusterSpec{Storage: v1alpha2.StorageSpec{Size: resource.MustParse("64Mi")}}, ""},
		{"64Mi cannot hold the WAL", memory("64Mi", ptr.To[int64](1<<20)), "too small"},
		{"128Mi cannot hold the WAL and a database", memory("128Mi", nil), "too small"},
		{"256Mi with the default 2GiB quota", memory("256Mi", nil), "set options.quotaBackendBytes to at most 123658240"},
		{"256Mi with a quota of 100Mi", memory("256Mi", ptr.To[int64](100<<20)), ""},
		{"256Mi with a quota just above the room", memory("256Mi", ptr.To[int64](123658241)), "quota"},
		{"4Gi with the default quota", memory("4Gi", nil), ""},
	}
	for _, c := range cases {
		got := memoryStorageWarning(c.spec)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: got %q, want it to contain %q", c.name, got, c.want)
		}
	}
}
