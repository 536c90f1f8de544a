module github.com/krabka/krole/bench/zk

go 1.26.0

require (
	github.com/go-zookeeper/zk v1.0.4
	github.com/krabka/krole/bench/peerkit v0.0.0
)

// peerkit (what the peers share) and krole (whose package chart peerkit
// prints with) are directories of this repository.
require github.com/krabka/krole v0.0.0 // indirect

replace (
	github.com/krabka/krole => ../../
	github.com/krabka/krole/bench/peerkit => ../peerkit
)
