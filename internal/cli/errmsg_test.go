package cli

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
)

// TestErrorsWithoutPackagePrefixes: a failing command's line names no
// internal package. A broker whose transaction.max.timeout.ms is below
// krole's transaction timeout fails `krole register` with the broker's
// numbers and the flag that sets krole's, not "fencing config: TxnTimeout".
func TestErrorsWithoutPackagePrefixes(t *testing.T) {
	t.Parallel()
	if testcluster.External() {
		t.Skip("sets a broker setting of the embedded cluster")
	}
	c := testcluster.Start(t, testcluster.Options{Partitions: 1, BrokerConfigs: map[string]string{fencing.BrokerMaxTxnTimeout: "3000"}})
	r := runOn(t, c, "register", "db", "--member", "m1")
	assertOneLineError(t, r, ExitFailure)
	assert.Contains(t, r.Stderr, "krole: the cluster refuses krole's transaction timeout: ")
	assert.Contains(t, r.Stderr, "transaction.max.timeout.ms=3000")
	assert.Contains(t, r.Stderr, "--lease-duration")
	assert.NotContains(t, r.Stderr, "fencing config")
	assert.NotContains(t, r.Stderr, "TxnTimeout")

	// The view's wrapped errors, as `krole serve` and `krole run` report them.
	var buf bytes.Buffer
	report(&buf, fmt.Errorf("following the role topic: %w",
		fmt.Errorf("view: probing the end of the role topic: %w", errors.New("view: stopped"))))
	assert.Equal(t, "krole: following the role topic: probing the end of the role topic: stopped\n", buf.String())
}
