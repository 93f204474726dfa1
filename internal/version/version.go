// Package version decides which etcd version changes a running cluster may
// take, following etcd's upgrade guides: patch releases within a minor in
// either direction at any time; one minor up at a time, and only from a
// patch the guide for that step accepts; one minor down only through etcd's
// downgrade API (etcd 3.6 and later); nothing else.
package version

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is an etcd release, major.minor.patch.
type Version struct{ Major, Minor, Patch int }

// Parse reads "3.6.16" (a leading "v" is accepted).
func Parse(s string) (Version, error) {
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("etcd version %q is not major.minor.patch", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return Version{}, fmt.Errorf("etcd version %q is not major.minor.patch", s)
		}
		n[i] = v
	}
	return Version{n[0], n[1], n[2]}, nil
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// MinorString is "3.6", as etcd names cluster versions.
func (v Version) MinorString() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Less orders versions.
func (v Version) Less(o Version) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Patch < o.Patch
}

// upgradeFrom is, per target minor, the oldest patch of the minor before it
// that etcd's upgrade guide accepts for a rolling upgrade: "Upgrade etcd
// from v3.5 to v3.6" asks for 3.5.26 or later, "from v3.6 to v3.7" for
// 3.6.11 or later.
var upgradeFrom = map[[2]int]Version{
	{3, 6}: {3, 5, 26},
	{3, 7}: {3, 6, 11},
}

// Kind is the kind of a version change.
type Kind int

// The kinds of change.
const (
	// Same: nothing to change.
	Same Kind = iota
	// Patch: within one minor, up or down; members are simply rolled.
	Patch
	// MinorUp: one minor up; members are rolled and etcd raises the
	// cluster version once all run the new minor.
	MinorUp
	// MinorDown: one minor down, through etcd's downgrade API: enable it,
	// roll the members, etcd finishes it when all run the old minor.
	MinorDown
)

// Plan is the verdict on a version change.
type Plan struct {
	Kind Kind
	// Refused says why the change is not allowed, and what is.
	Refused string
}

// Decide judges a change of the members to target, given the versions the
// members run now and etcd's cluster version (major.minor; "" when unknown).
// A roll stopped half way may go on or go back: the cluster version (the
// lowest minor every member runs) decides what is safe.
func Decide(running []Version, cluster string, target Version) Plan {
	if len(running) == 0 {
		return Plan{Kind: Same}
	}
	low, high := running[0], running[0]
	for _, v := range running[1:] {
		if v.Less(low) {
			low = v
		}
		if high.Less(v) {
			high = v
		}
	}
	if low == target && high == target {
		return Plan{Kind: Same}
	}
	if target.Major != low.Major || target.Major != high.Major {
		return refuse(low, cluster, "etcd does not change major versions in place")
	}
	base := low
	if cluster != "" {
		if cv, err := Parse(cluster + ".0"); err == nil {
			base = Version{cv.Major, cv.Minor, 0}
		}
	}
	switch target.Minor {
	case base.Minor:
		return Plan{Kind: Patch}
	case base.Minor + 1:
		return minorUp(running, target)
	case base.Minor - 1:
		return minorDown(base, target, cluster)
	}
	return refuse(low, cluster, fmt.Sprintf("%s skips a minor version from cluster version %s; etcd upgrades and downgrades one minor at a time", target, base.MinorString()))
}

func minorUp(running []Version, target Version) Plan {
	from, known := upgradeFrom[[2]int{target.Major, target.Minor}]
	for _, v := range running {
		if v.Minor == target.Minor {
			continue
		}
		if !known {
			return Plan{Kind: MinorUp}
		}
		if v.Less(from) {
			return Plan{Refused: fmt.Sprintf("a member runs %s: etcd's guide upgrades to %s only from %s or later; "+
				"set version to the newest %s patch first (any %s.x from %s on is allowed next)",
				v, target.MinorString(), from, from.MinorString(), from.MinorString(), from)}
		}
	}
	return Plan{Kind: MinorUp}
}

func minorDown(base, target Version, cluster string) Plan {
	if base.Less(Version{3, 6, 0}) {
		return Plan{Refused: fmt.Sprintf("downgrading to %s needs etcd's downgrade API, which clusters on %s do not have; "+
			"allowed next: patch releases of %s, or %d.%d.x", target, base.MinorString(), base.MinorString(), base.Major, base.Minor+1)}
	}
	if cluster == "" {
		return Plan{Refused: "etcd's cluster version is not known yet; a minor downgrade waits for it"}
	}
	return Plan{Kind: MinorDown}
}

func refuse(low Version, cluster, why string) Plan {
	base := low.MinorString()
	if cluster != "" {
		base = cluster
	}
	return Plan{Refused: fmt.Sprintf("%s; allowed next: patch releases of %s, one minor up (from the patch the upgrade guide names), or one minor down on 3.6 and later", why, base)}
}

// SnapshotFirst reports whether a member moving from one version to another
// must take a snapshot on its old version first: etcd 3.7 no longer parses
// the v2 requests that 3.5 wrote to the raft log, and a member of a cluster
// born on 3.5 may still hold some after its last snapshot.
func SnapshotFirst(from, to Version) bool {
	return from.Major == 3 && from.Minor == 6 && to.Major == 3 && to.Minor >= 7
}
