package cli

import (
	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/internal/bench"
)

// runBenchAcquire runs `krole bench acquire` (bench.Acquire).
func runBenchAcquire(c *ucli.Context) error {
	var rounds int
	s, e, err := startBench(c, func() (err error) {
		rounds, err = positive(c, "rounds")
		return err
	})
	if err != nil {
		return err
	}
	defer e.close()
	res, err := bench.Acquire(c.Context, e.benchCluster(), bench.AcquireOptions{Rounds: rounds, Settings: s, Run: e.run})
	if err != nil {
		return err
	}
	res.Label = c.String("label")
	res.Settings["cluster"] = e.clusterName()
	return writeBench(c, *res)
}
