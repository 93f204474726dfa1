package cluster

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

const (
	// walSegment is the size etcd preallocates for each write-ahead-log file;
	// it keeps one file ahead of the one in use, so two are on disk at once.
	walSegment = 64 * 1000 * 1000
	// walRoom is what a data directory needs before the database: two WAL
	// files and a margin for snapshots and the first database pages.
	walRoom = 2*walSegment + 16<<20
)

// memoryStorageWarning explains why a memory-backed data directory of this
// size will fail, or "" when it is large enough. On tmpfs a full volume is
// not an alarm etcd can recover from but a crash that loses the member, so
// the database quota must end below what the WAL leaves free.
func memoryStorageWarning(o *v1alpha2.ObservedClusterSpec) string {
	if o == nil || o.Storage.Medium != v1alpha2.StorageMediumMemory {
		return ""
	}
	size := o.Storage.Size.Value()
	if size < walRoom {
		return fmt.Sprintf("storage.size %s is too small for a memory-backed member: etcd preallocates two 64 MB "+
			"write-ahead-log files and needs room for its database, so members fail with \"no space left on device\"; "+
			"use at least 256Mi", o.Storage.Size.String())
	}
	quota := int64(2 << 30) // etcd's default --quota-backend-bytes
	if o.Options != nil && o.Options.QuotaBackendBytes != nil && *o.Options.QuotaBackendBytes > 0 {
		quota = *o.Options.QuotaBackendBytes
	}
	if free := size - walRoom; quota > free {
		return fmt.Sprintf("the database quota (%s) is larger than what storage.size %s leaves after the write-ahead log; "+
			"the tmpfs fills before etcd raises its NOSPACE alarm and the member crashes; set options.quotaBackendBytes to at most %d",
			resource.NewQuantity(quota, resource.BinarySI), o.Storage.Size.String(), free)
	}
	return ""
}
