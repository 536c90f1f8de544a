package render

import (
	"io"
	"time"

	"github.com/krabka/krole/internal/roleread"
)

// Pruned writes the registrations `krole prune` judged gone as a table,
// times relative to now: what it did to each with --yes (yes), or what
// it would do.
func Pruned(w io.Writer, regs []roleread.Registration, yes bool, now time.Time) error {
	tw := NewTable(w, "ROLE", "MEMBER", "GONE SINCE", "ACTION")
	for _, p := range regs {
		action := "would prune (--yes prunes)"
		if p.Pruned {
			action = "pruned"
		} else if yes {
			action = "kept (came back)"
		}
		tw.Row(string(p.Role), string(p.Member), HumanTime(p.GoneSince, now), action)
	}
	return tw.Flush()
}
