// Package deps pins the modules krole's packages are being built on, until
// each is imported for real. Delete when every import below is used
// elsewhere.
package deps

import (
	_ "github.com/lovoo/goka"
	_ "github.com/lovoo/goka/storage"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/stretchr/testify/assert"
	_ "github.com/stretchr/testify/mock"
	_ "github.com/stretchr/testify/require"
	_ "github.com/urfave/cli/v2"
)
