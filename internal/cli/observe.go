package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/view"
)

func observeCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "observe",
		Usage:     "print a line each time a role's holder changes, until interrupted",
		UsageText: "krole observe ROLE [--timeout D]",
		Description: "Follows the role topic as 'krole table --watch' does, and prints the holder of\n" +
			"ROLE when it starts, then one line each time the holder changes: a new holder\n" +
			"or token, or no live holder (its lease released or run out). Renewals print\n" +
			"nothing. Like etcdctl elect -l. The holder is what the topic says, as this\n" +
			"machine judges the lease, not the broker's fence. SIGINT or SIGTERM ends it\n" +
			"within 10s, whatever the cluster does.\n\n" +
			"Text: \"HH:MM:SS.mmm ROLE held by M (token P/E, value V)\" or \"... ROLE has no holder\".\n" +
			"JSON (-o json), one object per line:\n" +
			"  {\"at\":MS,\"role\":R,\"holder\":{\"member\":M,\"value\":V,\"token\":{\"producer_id\":N,\"epoch\":N},\"fence\":N} or null}\n" +
			"\"at\" is when this machine saw the change (Unix ms); \"value\" is left out when none;\n" +
			"\"fence\" is the holding's fencing number (see 'krole run --help').",
		ArgsUsage: "ROLE",
		Flags: []ucli.Flag{
			viewTimeoutFlag(),
		},
		Action: runObserve,
	}
}

// observed is one line of `krole observe -o json`.
type observed struct {
	At     int64          `json:"at"`
	Role   codec.Role     `json:"role"`
	Holder *observedOwner `json:"holder"`
}

type observedOwner struct {
	Member codec.MemberID `json:"member"`
	Value  string         `json:"value,omitempty"`
	Token  codec.Token    `json:"token"`
	Fence  int64          `json:"fence"`
}

func runObserve(c *ucli.Context) error {
	role, err := roleArg(c)
	if err != nil {
		return err
	}
	lv, err := readyView(c, nil, true)
	if lv == nil {
		return err // nil when interrupted while the view caught up
	}
	defer lv.stop()
	st := server.Follow(c.Context, lv.View, time.Now, role)
	w, asJSON := stdout(c), outputFormat(c) == FormatJSON
	var werr error
	for rows := range holderChanges(st.C) {
		if werr != nil {
			continue // drain: the stream ends with ctx
		}
		for _, r := range rows {
			werr = printObserved(w, r, time.Now(), asJSON)
		}
	}
	if werr != nil {
		return werr
	}
	if errors.Is(st.Err(), view.ErrStopped) {
		if err := lv.stop(); err != nil {
			return fmt.Errorf("following the role topic: %w", err)
		}
	}
	return nil
}

func printObserved(w io.Writer, r server.Row, now time.Time, asJSON bool) error {
	o := observed{At: now.UnixMilli(), Role: r.Role}
	if h := liveHolder(r); h != nil {
		o.Holder = &observedOwner{Member: h.Member, Value: h.Value, Token: h.Token, Fence: h.Fence}
	}
	if asJSON {
		return writeJSON(w, o)
	}
	at := now.Format("15:04:05.000")
	if o.Holder == nil {
		_, err := fmt.Fprintf(w, "%s %s has no holder\n", at, r.Role)
		return err
	}
	value := ""
	if o.Holder.Value != "" {
		value = ", value " + shownValue(o.Holder.Value)
	}
	_, err := fmt.Fprintf(w, "%s %s held by %s (token %s%s)\n", at, r.Role, o.Holder.Member, o.Holder.Token, value)
	return err
}

// liveHolder returns r's holder when its lease is live, nil otherwise.
func liveHolder(r server.Row) *server.Holder {
	if r.Holder == nil || r.Holder.Expired {
		return nil
	}
	return r.Holder
}

// holderKey is what a change of holder changes: the live holder's member
// and token, "" without one. A renewal keeps it.
func holderKey(r server.Row) string {
	h := liveHolder(r)
	if h == nil {
		return ""
	}
	return string(h.Member) + " " + h.Token.String()
}

// holderChanges passes on, from a stream's batches, the rows whose role's
// holder changed since the last row passed on for that role (every row of
// the first batch), and drops the rest: renewals, candidates joining and
// leaving. It closes its channel when in closes; the caller reads it to
// the end.
func holderChanges(in <-chan []server.Row) <-chan []server.Row {
	out := make(chan []server.Row)
	go func() {
		defer close(out)
		last := map[codec.Role]string{}
		first := true
		for rows := range in {
			var pass []server.Row
			for _, r := range rows {
				k := holderKey(r)
				if old, seen := last[r.Role]; first || !seen || old != k {
					pass = append(pass, r)
				}
				last[r.Role] = k
			}
			if first || len(pass) > 0 {
				out <- pass
			}
			first = false
		}
	}()
	return out
}
