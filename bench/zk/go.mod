module github.com/krabka/krole/bench/zk

go 1.26.0

require github.com/krabka/krole v0.0.0

require github.com/go-zookeeper/zk v1.0.4

replace github.com/krabka/krole => ../../
