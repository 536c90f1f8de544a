package supervise

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestExitText(t *testing.T) {
	assert.Equal(t, "with code 0", ExitText(0))
	assert.Equal(t, "with code 3", ExitText(3))
	assert.Equal(t, "with code 128", ExitText(128))
	assert.Equal(t, "(killed by SIGKILL: killed)", ExitText(128+9))
	assert.Equal(t, "(killed by SIGTERM: terminated)", ExitText(128+15))
	assert.Equal(t, "(killed by signal 6: aborted)", ExitText(128+6))
}
