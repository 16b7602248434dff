package foreign

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// Recorder wraps an event recorder so that every event passes the door: its reason and
// action are made reasons of at most EventReasonMax, its note (formatted first) Text of
// at most EventNoteMax. Without it the API server refuses an event with a long note, and
// the recorder only logs that.
func Recorder(r events.EventRecorder) events.EventRecorder {
	if r == nil {
		return nil
	}
	if _, ok := r.(recorder); ok {
		return r
	}
	return recorder{r}
}

type recorder struct{ next events.EventRecorder }

func (r recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	text := note
	if len(args) > 0 {
		text = fmt.Sprintf(note, args...)
	}
	r.next.Eventf(regarding, related, eventtype, Reason(reason, EventReasonMax), Reason(action, EventReasonMax), "%s", Text(text, EventNoteMax))
}
