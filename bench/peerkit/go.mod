module github.com/krabka/krole/bench/peerkit

go 1.26.0

// krole, for its package chart (the output's format), is this
// repository's root.
require github.com/krabka/krole v0.0.0

replace github.com/krabka/krole => ../../
