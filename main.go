// Command krole is role succession with fencing on Apache Kafka.
package main

func main() {}
