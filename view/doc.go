// Package view materializes the role topic into a local table with a goka
// View: for each role its current lease and its candidates ranked by
// registration offset. Lookups read only the local table, never the broker.
package view
