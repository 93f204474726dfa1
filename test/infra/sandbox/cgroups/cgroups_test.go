package cgroups

import (
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	hybrid := `27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
29 28 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
32 29 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 29 0:30 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
34 29 0:31 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
35 29 0:32 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
36 29 0:33 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
40 27 0:33 /sandbox-x /mnt/elsewhere rw,relatime - cgroup2 cgroup2 rw
`
	v2 := `27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
29 28 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
`
	for _, tt := range []struct {
		name, mountinfo string
		v2              bool
		roots           []string
		freezer, cpuset string
		wantErr         bool
	}{
		{name: "hybrid v1", mountinfo: hybrid, roots: []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuset", "/sys/fs/cgroup/freezer", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"},
			freezer: "/sys/fs/cgroup/freezer", cpuset: "/sys/fs/cgroup/cpuset"},
		{name: "pure v2", mountinfo: v2, v2: true, roots: []string{"/sys/fs/cgroup"}, freezer: "/sys/fs/cgroup"},
		{name: "none", mountinfo: "27 1 254:0 / / rw - ext4 /dev/vda rw\n", wantErr: true},
	} {
		h, err := parse(strings.NewReader(tt.mountinfo))
		if tt.wantErr {
			if err == nil {
				t.Errorf("%s: want an error", tt.name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if h.V2 != tt.v2 || !slices.Equal(h.Roots, tt.roots) || h.freezer != tt.freezer || h.cpuset != tt.cpuset {
			t.Errorf("%s: got v2=%v roots=%v freezer=%q cpuset=%q", tt.name, h.V2, h.Roots, h.freezer, h.cpuset)
		}
	}
}
