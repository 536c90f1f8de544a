module github.com/krabka/krole/bench/kgroup

go 1.26.0

require (
	github.com/krabka/krole/bench/peerkit v0.0.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
)

// peerkit (what the peers share) and krole (whose package chart peerkit
// prints with) are directories of this repository.
require github.com/krabka/krole v0.0.0

replace (
	github.com/krabka/krole => ../../
	github.com/krabka/krole/bench/peerkit => ../peerkit
)
