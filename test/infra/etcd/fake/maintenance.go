package fake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/seed74754924/etcd-operator/internal/etcd"
)

// newBackend is about the size of a new member's backend file, all of it
// in use.
const newBackend = 20 << 10

// SetDBSize sets the backend sizes the member with this peer URL reports:
// the file's size and the part of it in use. What lies between is what a
// defragmentation returns to the file system.
func (c *Cluster) SetDBSize(peerURL string, size, inUse int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.byPeer(peerURL); m != nil {
		m.dbSize, m.dbInUse = size, inUse
	}
}

// DBSize returns the backend file size of the member with this peer URL.
func (c *Cluster) DBSize(peerURL string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.byPeer(peerURL); m != nil {
		return m.dbSize
	}
	return 0
}

// FailDefragment makes the next n Defragment calls to the member with this
// peer URL fail, as one that times out does.
func (c *Cluster) FailDefragment(peerURL string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.byPeer(peerURL); m != nil {
		m.defragFailures = n
	}
}

// Defragment is served by the member at the endpoint alone, without raft (a
// member cut off from its peers defragments too), but never by a learner,
// which refuses every call except Status and serializable reads; with auth
// on it needs a valid token.
func (f *client) Defragment(_ context.Context, endpoint string) error {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	m := f.c.byClient(endpoint)
	switch {
	case m == nil && f.c.cutAt(endpoint) != nil:
		return timedOut(endpoint)
	case m == nil:
		return fmt.Errorf("fake: dial %s: connection refused", endpoint)
	case m.IsLearner:
		return fmt.Errorf("%w: defragment", etcd.ErrLearnerRefused)
	}
	if err := f.authInfo(); err != nil {
		return err
	}
	if m.defragFailures > 0 {
		m.defragFailures--
		return fmt.Errorf("fake: defragmenting %s: %w", m.Name, context.DeadlineExceeded)
	}
	m.dbSize = m.dbInUse
	m.defrags++
	return nil
}

// Defrags counts the successful defragmentations of the member with this
// peer URL.
func (c *Cluster) Defrags(peerURL string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.byPeer(peerURL); m != nil {
		return m.defrags
	}
	return 0
}

// AlarmList goes through raft, as etcd serves it.
func (f *client) AlarmList(context.Context) ([]etcd.Alarm, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if _, err := f.consensus(); err != nil {
		return nil, err
	}
	out := []etcd.Alarm{}
	for _, id := range slices.Sorted(maps.Keys(f.c.alarms)) {
		out = append(out, etcd.Alarm{MemberID: id, Type: f.c.alarms[id]})
	}
	return out, nil
}

// AlarmDisarm goes through raft. etcd clears an alarm raised on that member
// of that type, and answers with it (nothing when there was none); the zero
// Alarm clears them all.
func (f *client) AlarmDisarm(_ context.Context, a etcd.Alarm) ([]etcd.Alarm, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if _, err := f.consensus(); err != nil {
		return nil, err
	}
	if a.Type != "" && a.Type != etcd.AlarmNoSpace && a.Type != etcd.AlarmCorrupt {
		return nil, errors.New("unknown alarm type " + a.Type)
	}
	out := []etcd.Alarm{}
	for _, id := range slices.Sorted(maps.Keys(f.c.alarms)) {
		typ := f.c.alarms[id]
		if a != (etcd.Alarm{}) && (id != a.MemberID || typ != a.Type) {
			continue
		}
		delete(f.c.alarms, id)
		out = append(out, etcd.Alarm{MemberID: id, Type: typ})
	}
	return out, nil
}
