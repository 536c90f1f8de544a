package processor_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
)

// A running member takes a role added to it as one given to New: it is
// elected, runs the work, and releases the role when Run ends. Add
// refuses a role it runs already, and any role outside Run.
func TestIntegrationAddARoleToARunningMember(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	v := e.view()
	tr := e.transport()
	events := make(chan processor.Event, 64)
	m, err := processor.New(tr, v, "node-a", []codec.Role{"first"}, processor.Options{
		Settings: itSettings(), Logger: testLog("node-a"),
		OnEvent: func(ev processor.Event) { events <- ev },
	})
	require.NoError(t, err)
	require.ErrorIs(t, m.Add("second"), processor.ErrNotRunning, "before Run")

	var mu sync.Mutex
	worked := map[codec.Role]bool{}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- m.Run(ctx, func(ctx context.Context, held processor.Held) error {
			mu.Lock()
			worked[held.Role] = true
			mu.Unlock()
			<-ctx.Done()
			return nil
		})
	}()
	elected := func(role codec.Role) processor.Event {
		t.Helper()
		for {
			select {
			case ev := <-events:
				if ev.Kind == processor.Elected && ev.Role == role {
					return ev
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s was never elected", role)
			}
		}
	}
	elected("first")
	require.NoError(t, m.Add("second"))
	ev := elected("second")
	assert.Equal(t, codec.MemberID("node-a"), ev.Member)
	assert.ErrorContains(t, m.Add("second"), "already runs")
	assert.ErrorContains(t, m.Add("bad name"), "role")
	assert.Equal(t, []codec.Role{"first", "second"}, m.Roles())
	assert.Eventually(t, func() bool { return e.state("second").Lease != nil }, 10*time.Second, 10*time.Millisecond,
		"the observer's view shows the added role's lease")
	l := e.state("second").Lease
	assert.Equal(t, codec.MemberID("node-a"), l.Member)
	assert.Equal(t, ev.Token, l.Token, "the lease is the election's")

	cancel()
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	mu.Lock()
	assert.True(t, worked["second"], "the added role ran Run's work")
	mu.Unlock()
	require.ErrorIs(t, m.Add("third"), processor.ErrNotRunning, "after Run")
	st := e.state("second")
	released := st.Lease == nil || st.Lease.Released() || st.Lease.Member != "node-a" ||
		(st.Session != nil && st.Session.Heartbeat.End)
	assert.True(t, released, "Run's end let the added role go: %+v", st.Lease)
}

// Roles added just before Run's context ends are left on the way out;
// once it has ended, Add refuses at once. Run returns either way.
func TestIntegrationAddWhileRunEnds(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	v := e.view()
	m, err := processor.New(e.transport(), v, "node-a", []codec.Role{"r0"}, processor.Options{Settings: itSettings(), Logger: testLog("node-a")})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- m.Run(ctx, nil) }()
	require.Eventually(t, func() bool { return m.Add("r1") == nil }, 10*time.Second, time.Millisecond, "Run starts")
	for i := 2; i <= 20; i++ {
		require.NoError(t, m.Add(codec.Role(fmt.Sprintf("r%d", i))))
	}
	cancel()
	require.ErrorIs(t, m.Add("r21"), processor.ErrNotRunning, "Run's context ended")
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	assert.Len(t, m.Roles(), 21)
}
