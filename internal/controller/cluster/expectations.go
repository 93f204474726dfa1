package cluster

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// expectations remembers the members this process created or deleted until
// the cache shows it, so that a reconcile on a stale cache never creates a
// second member or deletes a second victim. After a restart the cache is
// listed fresh, so nothing needs to survive the process.
type expectations struct {
	mu      sync.Mutex
	pending map[string]*expected
	// status holds, per cluster, the resourceVersion its object had before
	// this process last wrote its status, until the cache shows another.
	status map[string]statusWrite
	// removed holds the members this process removed from etcd, by UID,
	// until they are long gone (expectationTimeout): a pass on a cache that
	// still lists one must not ask its etcd about itself. etcd 3.6 panics
	// when a member that applied its own removal is asked for its status
	// (seen in most scale-downs on the sandbox), and the crash raced the
	// Pod's deletion: a kubelet that saw the container die before it saw
	// the deletion started it again.
	removed map[types.UID]time.Time
}

type statusWrite struct {
	before string
	since  time.Time
}

type expected struct {
	created map[string]bool
	deleted map[string]bool
	since   time.Time
}

// expectationTimeout bounds how long a missing watch event can hold a
// cluster; after it the cache is trusted again.
const expectationTimeout = time.Minute

func (e *expectations) entry(key string, now time.Time) *expected {
	if e.pending == nil {
		e.pending = map[string]*expected{}
	}
	x := e.pending[key]
	if x == nil {
		x = &expected{created: map[string]bool{}, deleted: map[string]bool{}, since: now}
		e.pending[key] = x
	}
	return x
}

func (e *expectations) created(key, name string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.entry(key, now).created[name] = true
}

func (e *expectations) deleted(key, name string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.entry(key, now).deleted[name] = true
}

func (e *expectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.pending, key)
	delete(e.status, key)
}

// wroteStatus remembers a status write that changed the object (from
// resourceVersion before to after): a pass on the object as it was before
// would decide from a status this process already replaced (a recovery's
// phase, a latched cluster ID) and write the old decision back over it.
func (e *expectations) wroteStatus(key, before, after string, now time.Time) {
	if before == "" || before == after {
		return // the server changed nothing: no newer version to wait for
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.status == nil {
		e.status = map[string]statusWrite{}
	}
	e.status[key] = statusWrite{before: before, since: now}
}

// statusSeen reports whether the cached cluster (at resourceVersion cached)
// is newer than the one this process last wrote the status of.
func (e *expectations) statusSeen(key, cached string, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	w, ok := e.status[key]
	if !ok {
		return true
	}
	if cached != w.before || now.Sub(w.since) > expectationTimeout {
		delete(e.status, key)
		return true
	}
	return false
}

// satisfied reports whether the cached members reflect every create and
// delete of this process, clearing what they do.
func (e *expectations) satisfied(key string, members []*v1alpha2.EtcdMember, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.pending[key]
	if x == nil {
		return true
	}
	seen := map[string]*v1alpha2.EtcdMember{}
	for _, m := range members {
		seen[m.Name] = m
	}
	for name := range x.created {
		if seen[name] != nil {
			delete(x.created, name)
		}
	}
	for name := range x.deleted {
		if m := seen[name]; m == nil || m.DeletionTimestamp != nil {
			delete(x.deleted, name)
		}
	}
	if len(x.created) == 0 && len(x.deleted) == 0 || now.Sub(x.since) > expectationTimeout {
		delete(e.pending, key)
		return true
	}
	return false
}

// removedFromEtcd remembers that etcd no longer lists the member.
func (e *expectations) removedFromEtcd(uid types.UID, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.removed == nil {
		e.removed = map[types.UID]time.Time{}
	}
	e.removed[uid] = now
}

// removedSet returns the members removed from etcd by this process within
// expectationTimeout, forgetting older ones.
func (e *expectations) removedSet(now time.Time) map[types.UID]bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[types.UID]bool{}
	for uid, at := range e.removed {
		if now.Sub(at) > expectationTimeout {
			delete(e.removed, uid)
			continue
		}
		out[uid] = true
	}
	return out
}
