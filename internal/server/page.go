package server

import (
	_ "embed"
	"net/http"
)

// pageHTML is the page at /: the table of roles, kept live by an
// EventSource on /v1/watch. It is self-contained (no external script,
// style or font), so it works where the browser has no other network.
//
//go:embed page.html
var pageHTML []byte

func page(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
	_, _ = w.Write(pageHTML)
}
