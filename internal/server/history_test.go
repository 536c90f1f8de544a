package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
)

func heldRow(role codec.Role, m codec.MemberID, epoch int16) Row {
	return Row{Role: role, Holder: &Holder{Member: m, Token: codec.Token{ProducerID: 7, Epoch: epoch}, GrantedAt: 1000, Deadline: 11000}}
}

// TestHistoryKinds: the history names each change of holder by what
// preceded it, ignores renewals, and stays within its window and its
// bound of transitions, keeping the holder at the window's start.
func TestHistoryKinds(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	h := NewHistory(time.Minute, 6, func() time.Time { return now })
	step := func(r Row) { now = now.Add(time.Second); h.record(r, false) }

	h.record(heldRow("db", "m1", 0), true)
	step(heldRow("db", "m1", 0)) // a renewal: nothing
	released := heldRow("db", "m1", 0)
	released.Holder.GrantedAt, released.Holder.Deadline, released.Holder.Expired = 0, 1, true
	step(released)
	step(heldRow("db", "m2", 1))
	expired := heldRow("db", "m2", 1)
	expired.Holder.Expired = true
	step(expired)
	step(heldRow("db", "m3", 2))
	step(heldRow("db", "m1", 3)) // a new token while m3 looked live
	kinds := func() []string {
		var ks []string
		for _, tr := range h.Role("db").Transitions {
			ks = append(ks, tr.Kind)
		}
		return ks
	}
	assert.Equal(t, []string{TransitionInitial, TransitionReleased, TransitionHandover, TransitionExpired, TransitionFailover, TransitionTakeover}, kinds())
	rh := h.Role("db")
	assert.Nil(t, rh.Transitions[1].Holder)
	assert.Equal(t, &HistoryHolder{Member: "m3", Token: codec.Token{ProducerID: 7, Epoch: 2}}, rh.Transitions[4].Holder)

	step(Row{Role: "db"}) // the lease record went away
	assert.Equal(t, TransitionVacant, kinds()[len(kinds())-1])
	assert.Len(t, kinds(), 6, "at most 6 transitions")

	// Two minutes later the window holds nothing new: only the holder at
	// its start remains.
	now = now.Add(2 * time.Minute)
	assert.Equal(t, []string{TransitionVacant}, kinds())
	assert.Equal(t, now.Add(-time.Minute).UnixMilli(), h.Role("db").Since)

	h.record(Row{Role: "quiet"}, false)
	assert.Empty(t, h.Role("quiet").Transitions, "a role never held has no history")
}

// TestHistoryEndpoint: GET /v1/roles/{role}/history answers the history
// a History following the view recorded: the failover the test causes.
func TestHistoryEndpoint(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	m.Register("db", "m1")
	m.Register("db", "m2")
	l1 := m.Lease("db", "m1", time.Second)
	v := runView(t, c)
	caughtUp(t, v)
	hist := NewHistory(time.Hour, 0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- hist.Run(ctx, v) }()
	t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })
	h := newHandler(t, v, Options{History: hist, Source: Source{Brokers: c.Config.Brokers, Topic: c.Config.Topic}})

	var rh RoleHistory
	require.Eventually(t, func() bool { // m1's lease runs out
		rec := get(t, h, "/v1/roles/db/history")
		require.Equal(t, http.StatusOK, rec.Code)
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rh))
		return len(rh.Transitions) == 2
	}, 20*time.Second, 20*time.Millisecond)
	l2 := m.Lease("db", "m2", time.Hour)
	require.Eventually(t, func() bool {
		require.NoError(t, json.Unmarshal(get(t, h, "/v1/roles/db/history").Body.Bytes(), &rh))
		return len(rh.Transitions) == 3
	}, 20*time.Second, 20*time.Millisecond)
	assert.Equal(t, codec.Role("db"), rh.Role)
	assert.Equal(t, TransitionInitial, rh.Transitions[0].Kind)
	assert.Equal(t, &HistoryHolder{Member: "m1", Token: l1.Token}, rh.Transitions[0].Holder)
	assert.Equal(t, TransitionExpired, rh.Transitions[1].Kind)
	assert.Equal(t, Transition{At: rh.Transitions[2].At, Kind: TransitionFailover, Holder: &HistoryHolder{Member: "m2", Token: l2.Token}}, rh.Transitions[2])

	var src sourceBody
	require.NoError(t, json.Unmarshal(get(t, h, "/v1/source").Body.Bytes(), &src))
	assert.Equal(t, sourceBody{Source: Source{Brokers: c.Config.Brokers, Topic: c.Config.Topic}, HistoryWindowMS: 3_600_000}, src)
	assert.Equal(t, http.StatusNotFound, get(t, newHandler(t, v, Options{}), "/v1/roles/db/history").Code)
}
