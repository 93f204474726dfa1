package defrag

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed74754924/etcd-operator/api/v1alpha2"
)

// A run calls Defragment only under a grant of its own request for that
// member with a whole call's time left; otherwise it asks (again) or waits.
func TestJudgeLock(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	asked := now.Add(-5 * time.Second)
	req := func(member string, since time.Time) *v1alpha2.DefragRequest {
		return &v1alpha2.DefragRequest{Member: member, Since: metav1.NewTime(since)}
	}
	lock := func(holder, member string, since time.Time, expires time.Duration) *v1alpha2.MaintenanceLock {
		return &v1alpha2.MaintenanceLock{Holder: holder, Member: member, RequestedAt: metav1.NewTime(since),
			GrantedAt: metav1.NewTime(asked), ExpiresAt: metav1.NewTime(now.Add(expires))}
	}
	for _, tc := range []struct {
		name string
		req  *v1alpha2.DefragRequest
		lock *v1alpha2.MaintenanceLock
		want lockVerdict
		why  string
	}{
		{"granted", req("m1", asked), lock("d", "m1", asked, 6*time.Minute), lockGo, "granted"},
		{"not asked yet", nil, nil, lockAsk, "no request"},
		{"asked for another member", req("m0", asked), lock("d", "m0", asked, 6*time.Minute), lockAsk, "no request"},
		{"asked, not granted yet", req("m1", asked), nil, lockWait, "asked"},
		{"granted to another run", req("m1", asked), lock("other", "m1", asked, 6*time.Minute), lockWait, "asked"},
		{"granted to an older request", req("m1", asked), lock("d", "m1", asked.Add(-time.Minute), 6*time.Minute), lockWait, "asked"},
		{"unanswered too long", req("m1", now.Add(-renewAfter)), nil, lockAsk, "not granted"},
		{"expires too soon", req("m1", asked), lock("d", "m1", asked, defragTimeout-time.Second), lockAsk, "too soon"},
		{"expired", req("m1", asked), lock("d", "m1", asked, -time.Second), lockAsk, "too soon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := judgeLock(tc.req, tc.lock, "d", "m1", now)
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("judgeLock = %d (%s), want %d (%s)", got, why, tc.want, tc.why)
			}
		})
	}
}
