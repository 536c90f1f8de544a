package check

import (
	"fmt"
	"io"

	"github.com/krabka/krole/internal/render"
)

// The text of `krole check`: a result's lines as each check ends, and the
// summary last (-o json prints the [Report] instead).

// nameWidth aligns the status column: the longest check name.
const nameWidth = len(NameTxnReadCommit)

// LineWidth is the width a check's lines are wrapped at.
const LineWidth = 120

// WriteLine prints one check's lines: name, status and what it
// found, then the fix of a check that did not pass, wrapped at
// LineWidth under the detail.
func WriteLine(w io.Writer, r Result) error {
	text := r.Detail
	if r.Fix != "" && (!r.OK || r.Warn) {
		text += "; fix: " + r.Fix
	}
	head := fmt.Sprintf("%-*s  %s  ", nameWidth, r.Name, r.Status())
	_, err := fmt.Fprint(w, render.Wrap(head, text, LineWidth))
	return err
}

// WriteSummary prints the run's verdict last: how many checks
// failed and the first failure, which often causes the rest (a missing
// topic fails every check that reads it).
func WriteSummary(w io.Writer, rep Report) error {
	var failed []Result
	warned, skipped := 0, 0
	for _, r := range rep.Checks {
		switch {
		case !r.OK:
			failed = append(failed, r)
		case r.Skipped:
			skipped++
		case r.Warn:
			warned++
		}
	}
	var text string
	switch {
	case rep.Interrupted != "":
		text = fmt.Sprintf("%s: %d of %d checks not run or cut short; no verdict", rep.Interrupted, skipped, len(rep.Checks))
	case len(failed) > 0:
		first := failed[0]
		text = fmt.Sprintf("%d of %d checks failed; the first, %s: %s", len(failed), len(rep.Checks), first.Name, first.Detail)
		if first.Fix != "" {
			text += "; fix that first: " + first.Fix
		}
	default:
		text = fmt.Sprintf("no check failed (%d passed, %d warned, %d skipped)", len(rep.Checks)-warned-skipped, warned, skipped)
	}
	_, err := fmt.Fprint(w, render.Wrap("summary: ", text, LineWidth))
	return err
}
