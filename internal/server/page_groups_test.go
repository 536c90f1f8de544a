package server

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/grouptest"
	"github.com/krabka/krole/internal/testcluster"
)

// pageGroups is the page's Groups section as shown: per group, its name,
// a row of cell texts per member, and the balance line; null when the
// section is hidden.
const pageGroups = `document.getElementById("groups-section").hidden ? null :
  [...document.querySelectorAll("#groups .group")].map(g => ({
    group: g.querySelector("h3").textContent,
    members: [...g.querySelectorAll("tbody tr")].map(tr => [...tr.cells].map(td => td.textContent)),
    balance: g.querySelector("p.balance").textContent,
  }))`

type shownGroup struct {
	Group   string     `json:"group"`
	Members [][]string `json:"members"`
	Balance string     `json:"balance"`
}

// servePage serves h for a page over HTTP until the test ends, the
// page's event streams ended first: srv.Close waits for them.
func servePage(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	base, stop := context.WithCancel(context.Background())
	srv := httptest.NewUnstartedServer(h)
	srv.Config.BaseContext = func(net.Listener) context.Context { return base }
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(stop)
	return srv
}

// TestPageGroupsInChromium: the page's Groups section in headless
// Chromium says there are none before any member runs, then shows the
// three members of the group shards over 12 roles with 4 roles each and
// the balance line, and, once one has drained, that member draining
// with weight 0 and no role and the others 6 each, and its roles' moves
// to drain listed under the group, without a reload. A server whose
// table reads no groups hides the section.
func TestPageGroupsInChromium(t *testing.T) {
	bin := chromiumBinary()
	if bin == "" {
		t.Skip("chromium not installed: apt-get install chromium (or set KROLE_CHROMIUM to a Chrome/Chromium binary)")
	}
	c := testcluster.Start(t, testcluster.Options{})
	v := runView(t, c)
	caughtUp(t, v)
	srv := servePage(t, newHandler(t, WithSessions(v), Options{}))

	b := startChromium(t, bin)
	page := b.openWatching(srv.URL+"/", statusLog)
	var text string
	page.waitFor("the page says there is no group", `document.getElementById("groups").textContent`, &text,
		func() bool { return text == "No groups." })

	shards := grouptest.StartShards(t, c)
	want := []shownGroup{{Group: "shards", Members: [][]string{
		{"node-a", "1", "no", "4"},
		{"node-b", "1", "no", "4"},
		{"node-c", "1", "no", "4"},
	}, Balance: "3 members, 12 roles held: max 4, mean 4.00, max/mean 1.00"}}
	var shown []shownGroup
	page.waitFor("the page shows the balanced group", pageGroups, &shown, func() bool { return assert.ObjectsAreEqual(want, shown) })
	var swatches int
	require.NoError(t, page.eval(testCtx(t), `document.querySelectorAll("#groups td.member .sw").length`, &swatches))
	assert.Equal(t, 3, swatches, "each member in its color")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, shards.Sessions["node-b"].Drain(ctx))
	shards.Await(t, map[codec.MemberID]int{"node-a": 6, "node-c": 6})
	want = []shownGroup{{Group: "shards", Members: [][]string{
		{"node-a", "1", "no", "6"},
		{"node-b", "0", "yes", "0"},
		{"node-c", "1", "no", "6"},
	}, Balance: "3 members, 12 roles held: max 6, mean 6.00, max/mean 1.00"}}
	page.waitFor("the page shows node-b drained", pageGroups, &shown, func() bool { return assert.ObjectsAreEqual(want, shown) })
	var draining []string
	require.NoError(t, page.eval(testCtx(t), `[...document.querySelectorAll("#groups tr.draining")].map(tr => tr.dataset.member)`, &draining))
	assert.Equal(t, []string{"node-b"}, draining)
	// Under the group, its last moves, newest last: node-b's four roles,
	// each handed over to drain, seen as they happened.
	var moves []string
	drained := func() bool {
		if len(moves) != 5 {
			return false
		}
		for _, m := range moves[1:] {
			if !strings.Contains(m, ": node-b \u2192 node-") || !strings.Contains(m, ", drain, unheld ") {
				return false
			}
		}
		return true
	}
	page.waitFor("the page lists node-b's drain", `[...document.querySelectorAll("#groups .group ul.moves li")].map(li => li.textContent)`, &moves, drained)

	// A table that reads no groups: no section at all.
	plain := servePage(t, newHandler(t, fixture(), Options{}))
	other := b.openWatching(plain.URL+"/", statusLog)
	var hidden bool
	other.waitFor("the Groups section is hidden", `document.getElementById("groups-section").hidden`, &hidden, func() bool { return hidden })
}
