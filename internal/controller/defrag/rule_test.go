package defrag

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

const mi = 1 << 20

func q(s string) *resource.Quantity {
	v := resource.MustParse(s)
	return &v
}

func TestRuleSelection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rule  *v1alpha2.DefragRule
		s     sizes
		quota int64
		want  bool
	}{
		{"no rule, 201Mi free", nil, sizes{300 * mi, 99 * mi}, 0, true},
		{"no rule, exactly 200Mi free is not above", nil, sizes{300 * mi, 100 * mi}, 0, false},
		{"no rule, little free", nil, sizes{300 * mi, 290 * mi}, 0, false},
		{"empty rule is the default", &v1alpha2.DefragRule{}, sizes{300 * mi, 99 * mi}, 0, true},
		{"all, nothing free", &v1alpha2.DefragRule{All: true}, sizes{20 << 10, 20 << 10}, 0, true},
		{"freeSpaceAbove lowered", &v1alpha2.DefragRule{FreeSpaceAbove: q("10Mi")}, sizes{30 * mi, 19 * mi}, 0, true},
		{"freeSpaceAbove as a bare byte count", &v1alpha2.DefragRule{FreeSpaceAbove: q("1048576")}, sizes{3 * mi, 1 * mi}, 0, true},
		{"quota arm fires", &v1alpha2.DefragRule{QuotaUsageAbove: "50%"}, sizes{60 * mi, 20 * mi}, 100 * mi, true},
		{"quota arm: usage not above", &v1alpha2.DefragRule{QuotaUsageAbove: "50%"}, sizes{50 * mi, 10 * mi}, 100 * mi, false},
		{"quota arm: too little to reclaim", &v1alpha2.DefragRule{QuotaUsageAbove: "50%"}, sizes{60 * mi, 40 * mi}, 100 * mi, false},
		{"quota arm: exactly minReclaim reclaims", &v1alpha2.DefragRule{QuotaUsageAbove: "50%", MinReclaim: q("20Mi")}, sizes{60 * mi, 40 * mi}, 100 * mi, true},
		{"quota arm: default quota 2Gi", &v1alpha2.DefragRule{QuotaUsageAbove: "10%"}, sizes{210 * mi, 150 * mi}, 0, true},
		{"quota arm: default quota, below", &v1alpha2.DefragRule{QuotaUsageAbove: "10%"}, sizes{200 * mi, 150 * mi}, 0, false},
		{"100% never fires", &v1alpha2.DefragRule{QuotaUsageAbove: "100%"}, sizes{100 * mi, 10 * mi}, 100 * mi, false},
		{"garbage percent never fires", &v1alpha2.DefragRule{QuotaUsageAbove: "x%"}, sizes{100 * mi, 10 * mi}, 100 * mi, false},
		{"free-space arm still applies beside the quota arm", &v1alpha2.DefragRule{QuotaUsageAbove: "99%"}, sizes{500 * mi, 10 * mi}, 4096 * mi, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := judge(tc.rule, tc.s, tc.quota)
			if got.defrag != tc.want || got.why == "" {
				t.Errorf("judge = %+v, want defrag=%t with a reason", got, tc.want)
			}
		})
	}
}
