package render

import (
	"fmt"
	"io"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/server"
)

// Observation is one line of `krole observe -o json`.
type Observation struct {
	At     int64           `json:"at"`
	Role   codec.Role      `json:"role"`
	Holder *ObservedHolder `json:"holder"`
}

// ObservedHolder is the live holder an [Observation] names.
type ObservedHolder struct {
	Member codec.MemberID `json:"member"`
	Value  string         `json:"value,omitempty"`
	Token  codec.Token    `json:"token"`
	Fence  int64          `json:"fence"`
}

// Observed writes r's holder, live or not, seen at now, as a line of
// `krole observe`: text, or JSON (an [Observation]) when asJSON.
func Observed(w io.Writer, r server.Row, now time.Time, asJSON bool) error {
	o := Observation{At: now.UnixMilli(), Role: r.Role}
	if h := LiveHolder(r); h != nil {
		o.Holder = &ObservedHolder{Member: h.Member, Value: h.Value, Token: h.Token, Fence: h.Fence}
	}
	if asJSON {
		return WriteJSON(w, o)
	}
	at := now.Format("15:04:05.000")
	if o.Holder == nil {
		_, err := fmt.Fprintf(w, "%s %s has no holder\n", at, r.Role)
		return err
	}
	value := ""
	if o.Holder.Value != "" {
		value = ", value " + ShownValue(o.Holder.Value)
	}
	_, err := fmt.Fprintf(w, "%s %s held by %s (token %s%s)\n", at, r.Role, o.Holder.Member, o.Holder.Token, value)
	return err
}
