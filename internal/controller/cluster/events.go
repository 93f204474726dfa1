package cluster

import (
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed74754924/etcd-operator/internal/conditions"
)

func (r *Reconciler) event(obj client.Object, warning bool, reason, action, format string, args ...any) {
	conditions.Record(r.Recorder, obj, warning, reason, action, format, args...)
}

// warnOnce emits a Warning Event for a problem the status reports too, once
// per episode: when the status the pass started from already says it (a
// condition message carries the same text), the Event was emitted by an
// earlier pass and a retry adds nothing. The status survives restarts of the
// operator, so a crash loop does not repeat it either.
func (r *Reconciler) warnOnce(w *world, reason, action, message string, about ...client.Object) {
	for _, c := range w.original.Status.Conditions {
		if strings.Contains(c.Message, message) {
			return
		}
	}
	r.event(w.cluster, true, reason, action, "%s", message)
	for _, o := range about {
		r.event(o, true, reason, action, "%s", message)
	}
}
