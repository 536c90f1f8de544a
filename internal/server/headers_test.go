package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/view"
)

// TestEveryResponseIsNosniff: every answer of the server, whatever its
// route or status (the page, JSON, an error, an event stream, metrics, an
// unknown path, a refused method, a lookup before the view caught up),
// carries X-Content-Type-Options: nosniff.
func TestEveryResponseIsNosniff(t *testing.T) {
	up := httptest.NewServer(newHandler(t, fixture(), Options{}))
	t.Cleanup(up.Close)
	down := httptest.NewServer(newHandler(t, &fakeTable{err: view.ErrNotCaughtUp}, Options{Wait: 10 * time.Millisecond}))
	t.Cleanup(down.Close)

	for _, c := range []struct {
		base, method, path string
		code               int
	}{
		{up.URL, http.MethodGet, "/", http.StatusOK},
		{up.URL, http.MethodGet, "/healthz", http.StatusOK},
		{up.URL, http.MethodGet, "/metrics", http.StatusOK},
		{up.URL, http.MethodGet, "/v1/roles", http.StatusOK},
		{up.URL, http.MethodGet, "/v1/roles/db", http.StatusOK},
		{up.URL, http.MethodGet, "/v1/roles/nothere", http.StatusNotFound},
		{up.URL, http.MethodGet, "/v1/roles/bad!name", http.StatusBadRequest},
		{up.URL, http.MethodGet, "/v1/history", http.StatusNotFound},
		{up.URL, http.MethodGet, "/no/such/path", http.StatusNotFound},
		{up.URL, http.MethodPost, "/v1/roles", http.StatusMethodNotAllowed},
		{up.URL, http.MethodGet, "/v1/watch", http.StatusOK},
		{up.URL, http.MethodGet, "/v1/roles/db/watch", http.StatusOK},
		{down.URL, http.MethodGet, "/v1/roles", http.StatusServiceUnavailable},
		{down.URL, http.MethodGet, "/healthz", http.StatusServiceUnavailable},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, err := http.NewRequestWithContext(ctx, c.method, c.base+c.path, nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req) // an event stream answers with its headers at once
		require.NoError(t, err, "%s %s", c.method, c.path)
		assert.Equal(t, c.code, res.StatusCode, "%s %s", c.method, c.path)
		assert.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), "%s %s", c.method, c.path)
		cancel()
		res.Body.Close()
	}
}
