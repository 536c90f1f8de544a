package peerkit

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"reflect"
	"testing"
	"time"
)

// TestSettings: the flags' settings, per kind, as krole bench compare
// reads them.
func TestSettings(t *testing.T) {
	for kind, want := range map[string]map[string]any{
		"acquire":  {"ttl": "2s", "rounds": 5, "with_session": true},
		"failover": {"ttl": "2s", "rounds": 5, "members": 4},
	} {
		f := NewFlags("test", kind, "", "")
		f.Parse([]string{"--ttl", "2s", "--rounds", "5", "--members", "4", "--with-session"}, "", func() bool { return true })
		if got := f.Settings(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: settings %v, want %v", kind, got, want)
		}
	}
}

// TestReport: -o json writes one object in krole bench's format, its
// samples sorted and summarised.
func TestReport(t *testing.T) {
	f := NewFlags("test", "handover", "", "")
	f.Parse([]string{"-o", "json", "--label", "L"}, "", func() bool { return true })
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	err = f.Report("sys", []float64{3, 1, 2}, map[string]any{"k": "v"})
	os.Stdout = stdout
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := map[string]any{"kind": "handover", "system": "sys", "label": "L", "samples_ms": []any{1.0, 2.0, 3.0},
		"min_ms": 1.0, "median_ms": 2.0, "p90_ms": 3.0, "p99_ms": 3.0, "max_ms": 3.0, "settings": map[string]any{"k": "v"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %s", out)
	}
}

// TestAcquire: a sample a round, in milliseconds; an ended context stops
// the rounds.
func TestAcquire(t *testing.T) {
	samples, err := Acquire(context.Background(), 2, func(r int) (time.Duration, error) {
		return time.Duration(r+1) * 1500 * time.Microsecond, nil
	})
	if err != nil || !reflect.DeepEqual(samples, []float64{1.5, 3}) {
		t.Errorf("samples %v, %v", samples, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Acquire(ctx, 2, func(int) (time.Duration, error) { return time.Millisecond, nil }); err == nil {
		t.Error("rounds ran on an ended context")
	}
}
