package quorum

import "testing"

func voters(spec string) []Voter {
	// spec: one letter per voter, upper case healthy, lower case not.
	var out []Voter
	for _, r := range spec {
		name := string(r | 0x20)
		out = append(out, Voter{Name: name, Healthy: r < 'a'})
	}
	return out
}

func TestRemove(t *testing.T) {
	cases := []struct {
		voters string
		remove string
		ok     bool
	}{
		{"ABC", "c", true},   // 3 healthy → 2 healthy of 2
		{"ABc", "c", true},   // removing the sick one is always fine
		{"ABc", "a", false},  // 1 healthy of 2 left
		{"AB", "b", true},    // 1 of 1
		{"A", "a", false},    // last voter
		{"ABCDE", "e", true}, // 4 of 4
		{"ABCde", "a", false},
		{"ABCde", "e", true}, // 3 of 4 healthy, 3 needed
		{"ABC", "x", true},   // a learner leaves, quorum now
		{"Abc", "x", false},  // a learner leaves, no quorum to commit
		{"Ab", "b", false},   // 1 of 1 would stay, but 1 of 2 cannot commit it
		{"ABcd", "c", false}, // 2 of 4 now: no quorum to commit
	}
	for _, c := range cases {
		if got := Remove(voters(c.voters), c.remove); got.OK != c.ok {
			t.Errorf("Remove(%s, %s) = %+v, want ok=%t", c.voters, c.remove, got, c.ok)
		}
	}
}

func TestPromote(t *testing.T) {
	cases := []struct {
		voters   string
		caughtUp bool
		ok       bool
	}{
		{"A", true, true},   // 2 of 2
		{"A", false, false}, // 1 of 2, 2 needed
		{"AB", false, true}, // 2 of 3
		{"Ab", false, false},
		{"ABC", false, true}, // 3 of 4, 3 needed
		{"ABc", false, false},
	}
	for _, c := range cases {
		if got := Promote(voters(c.voters), "l", c.caughtUp); got.OK != c.ok {
			t.Errorf("Promote(%s, caughtUp=%t) = %+v, want ok=%t", c.voters, c.caughtUp, got, c.ok)
		}
	}
}

func TestRestartAndAdd(t *testing.T) {
	if !Restart(voters("ABC"), "a").OK || Restart(voters("ABc"), "a").OK || Restart(voters("A"), "a").OK {
		t.Error("Restart projections wrong")
	}
	if !AddLearner(voters("ABc")).OK || AddLearner(voters("Abc")).OK || AddLearner(nil).OK {
		t.Error("AddLearner projections wrong")
	}
}
