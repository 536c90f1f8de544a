package processor

import (
	"testing"

	"github.com/krabka/krole/internal/testcluster"
)

// TestMain fails the run when goroutines other than those
// testcluster.LeakOptions allows outlive the tests (go.uber.org/goleak).
func TestMain(m *testing.M) { testcluster.VerifyNoLeaks(m) }
