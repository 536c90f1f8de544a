package fencing_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/fencing"
)

// TestConfigKeepsThePasswordSecret prints and logs a Config every way Go
// code commonly does, and checks that the SASL password shows in none.
func TestConfigKeepsThePasswordSecret(t *testing.T) {
	const pw = "pw-5e3f0b-secret"
	cfg := fencing.Config{Brokers: []string{"127.0.0.1:9092"},
		SASL: fencing.SASLConfig{Mechanism: fencing.SASLPlain, User: "alice", Password: pw}}
	js, err := json.Marshal(cfg)
	require.NoError(t, err)
	var text, jsonLog bytes.Buffer
	slog.New(slog.NewTextHandler(&text, nil)).Info("cfg", "cfg", cfg, "sasl", cfg.SASL)
	slog.New(slog.NewJSONHandler(&jsonLog, nil)).Info("cfg", "cfg", cfg, "sasl", cfg.SASL)
	for name, out := range map[string]string{
		"%v": fmt.Sprintf("%v", cfg), "%+v": fmt.Sprintf("%+v", cfg), "%#v": fmt.Sprintf("%#v", cfg),
		"%+v of SASL": fmt.Sprintf("%+v", cfg.SASL), "%s of SASL": cfg.SASL.String(),
		"%+v of a pointer": fmt.Sprintf("%+v", &cfg),
		"JSON":             string(js), "slog text": text.String(), "slog JSON": jsonLog.String(),
	} {
		assert.NotContains(t, out, pw, name)
		assert.Contains(t, out, "alice", "%s still shows the user", name)
	}
}
