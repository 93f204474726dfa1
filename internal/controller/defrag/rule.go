package defrag

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// Built-in values of the rule, as the reference API defines them.
const (
	// defaultFreeSpaceAbove is the gate of an empty rule.
	defaultFreeSpaceAbove = 200 << 20
	// defaultMinReclaim is the floor of the quota arm.
	defaultMinReclaim = 32 << 20
	// defaultQuota is etcd's backend quota when the cluster sets none.
	defaultQuota = 2 << 30
)

// Reasons a member is not defragmented (DefragMemberStatus.Reason).
const (
	// ReasonBelowThreshold: the rule did not select the member.
	ReasonBelowThreshold = "BelowThreshold"
)

// sizes is what etcd reports of one member's backend.
type sizes struct {
	DBSize, DBSizeInUse int64
}

// verdict is the rule's answer for one member, with why.
type verdict struct {
	defrag bool
	why    string
}

// judge applies the rule to a member's backend. quota is the cluster's
// backend quota in bytes (0: etcd's default). Unset rule fields take the
// built-in values; a quotaUsageAbove that does not parse, or 100% (a
// backend cannot exceed its quota: etcd raises NOSPACE first), never fires.
func judge(rule *v1alpha2.DefragRule, s sizes, quota int64) verdict {
	if rule == nil {
		rule = &v1alpha2.DefragRule{}
	}
	if rule.All {
		return verdict{true, "rule.all defragments every member"}
	}
	reclaimable := s.DBSize - s.DBSizeInUse
	free := bytesOr(rule.FreeSpaceAbove, defaultFreeSpaceAbove)
	if reclaimable > free {
		return verdict{true, fmt.Sprintf("%d bytes reclaimable, above freeSpaceAbove %d", reclaimable, free)}
	}
	pct, ok := percent(rule.QuotaUsageAbove)
	if !ok {
		return verdict{false, fmt.Sprintf("%d bytes reclaimable, not above freeSpaceAbove %d", reclaimable, free)}
	}
	if quota <= 0 {
		quota = defaultQuota
	}
	floor := bytesOr(rule.MinReclaim, defaultMinReclaim)
	// DBSize > pct% of the quota, in integers.
	over := s.DBSize*100 > pct*quota
	if over && reclaimable >= floor {
		return verdict{true, fmt.Sprintf("backend of %d bytes above %d%% of the quota %d, %d bytes reclaimable", s.DBSize, pct, quota, reclaimable)}
	}
	return verdict{false, fmt.Sprintf("%d bytes reclaimable, not above freeSpaceAbove %d; backend of %d bytes is %s %d%% of the quota %d with minReclaim %d",
		reclaimable, free, s.DBSize, map[bool]string{true: "above", false: "not above"}[over], pct, quota, floor)}
}

// percent parses "N%" for N in 1..99.
func percent(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSuffix(s, "%"), 10, 64)
	if err != nil || !strings.HasSuffix(s, "%") || n < 1 || n > 99 {
		return 0, false
	}
	return n, true
}

func bytesOr(q *resource.Quantity, def int64) int64 {
	if q == nil {
		return def
	}
	return q.Value()
}

// quotaOf is the cluster's backend quota (0: etcd's default).
func quotaOf(c *v1alpha2.EtcdCluster) int64 {
	o := c.Status.Observed
	if o == nil || o.Options == nil || o.Options.QuotaBackendBytes == nil {
		return 0
	}
	return *o.Options.QuotaBackendBytes
}
