// Package history records what etcd's clients saw (puts and reads, with the
// times they started and ended and what etcd answered) and checks that the
// whole history is linearizable: that there is one order of the operations,
// each taking effect at a moment between its start and its end, in which
// every read returns the value of the last write before it. A write that
// failed may or may not have taken effect (a timeout after the leader
// committed it, say): its outcome is unknown, and the checker tries both.
//
// The end-to-end drills and the soak record their writers and readers here
// and fail on a history that is not linearizable, writing a visualisation
// of it (an HTML file) next to the test output.
package history

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is what an operation did.
type Kind int

const (
	// Put wrote a value under a key.
	Put Kind = iota
	// Get read a key (linearizable read).
	Get
)

// Op is one client operation as the client saw it.
type Op struct {
	Client int
	Kind   Kind
	Key    string
	// Value written, or read (for a read that found the key).
	Value string
	// Found: a read found the key.
	Found bool
	// Call and Return are when the client started and when it saw the
	// answer.
	Call, Return time.Time
	// Err is why the operation failed: a failed read had no effect and is
	// left out; a failed write may have taken effect.
	Err error
}

// Recorder collects operations from concurrent clients.
type Recorder struct {
	mu  sync.Mutex
	ops []Op
}

// Record adds an operation.
func (r *Recorder) Record(op Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
}

// Ops returns a copy of what was recorded.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Verdict is the checker's answer.
type Verdict struct {
	// Linearizable: an order exists. False with Timeout means the checker
	// gave up (the history is too entangled to decide in time).
	Linearizable bool
	Timeout      bool
	// Checked counts the operations checked; Unknown the writes whose
	// outcome was unknown.
	Checked, Unknown int
}

func (v Verdict) String() string {
	switch {
	case v.Timeout:
		return fmt.Sprintf("undecided (timeout) over %d operations, %d of unknown outcome", v.Checked, v.Unknown)
	case v.Linearizable:
		return fmt.Sprintf("linearizable: %d operations, %d of unknown outcome", v.Checked, v.Unknown)
	}
	return fmt.Sprintf("NOT linearizable: %d operations, %d of unknown outcome", v.Checked, v.Unknown)
}

// input and output are what the model sees of an operation.
type input struct {
	kind  Kind
	key   string
	value string
}

type output struct {
	value string
	found bool
}

// register is the state of one key: its value, if it exists.
type register struct {
	value  string
	exists bool
}

// model is etcd's key-value store seen one key at a time: each key is a
// register, and the history is linearizable if the history of every key is.
var model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(input).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return register{} },
	Step: func(state, in, out any) (bool, any) {
		s, i := state.(register), in.(input)
		if i.kind == Put {
			return true, register{value: i.value, exists: true}
		}
		o := out.(output)
		return o.found == s.exists && (!o.found || o.value == s.value), s
	},
	DescribeOperation: func(in, out any) string {
		i := in.(input)
		if i.kind == Put {
			return fmt.Sprintf("put(%s, %s)", i.key, i.value)
		}
		o := out.(output)
		if !o.found {
			return fmt.Sprintf("get(%s) -> none", i.key)
		}
		return fmt.Sprintf("get(%s) -> %s", i.key, o.value)
	},
	DescribeState: func(state any) string {
		s := state.(register)
		if !s.exists {
			return "none"
		}
		return s.value
	},
}

// Check decides whether the operations are linearizable, within timeout.
// When they are not (or the checker gave up) and visualization is not
// empty, it writes an HTML visualisation of the history there.
func Check(ops []Op, timeout time.Duration, visualization string) (Verdict, error) {
	var history []porcupine.Operation
	v := Verdict{}
	origin := earliest(ops)
	for _, op := range ops {
		if op.Kind == Get && op.Err != nil {
			// A failed read observed nothing.
			continue
		}
		p := porcupine.Operation{
			ClientId: op.Client,
			Input:    input{kind: op.Kind, key: op.Key, value: op.Value},
			Output:   output{value: op.Value, found: op.Found},
			Call:     op.Call.Sub(origin).Nanoseconds(),
			Return:   op.Return.Sub(origin).Nanoseconds(),
		}
		if op.Kind == Put && op.Err != nil {
			// It may take effect at any time after it started.
			p.Return = math.MaxInt64
			v.Unknown++
		}
		history = append(history, p)
	}
	v.Checked = len(history)
	res, info := porcupine.CheckOperationsVerbose(model, history, timeout)
	v.Linearizable, v.Timeout = res == porcupine.Ok, res == porcupine.Unknown
	if res != porcupine.Ok && visualization != "" {
		if err := porcupine.VisualizePath(model, info, visualization); err != nil {
			return v, fmt.Errorf("writing the visualisation: %w", err)
		}
	}
	return v, nil
}

func earliest(ops []Op) time.Time {
	var t time.Time
	for _, op := range ops {
		if t.IsZero() || op.Call.Before(t) {
			t = op.Call
		}
	}
	return t
}
