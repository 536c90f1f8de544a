// Package kafkalog holds the read_committed helpers that fencing's and the
// view's raw fetch paths share: recognising an abort marker and ordering a
// fetch response's aborted transactions.
package kafkalog

import (
	"encoding/binary"

	"github.com/IBM/sarama"
)

// IsAbortMarker reports whether a control batch holds an ABORT marker. A
// control record's key is int16 version, int16 type (0 abort, 1 commit).
func IsAbortMarker(rb *sarama.RecordBatch) bool {
	if len(rb.Records) == 0 || len(rb.Records[0].Key) < 4 {
		return false
	}
	return binary.BigEndian.Uint16(rb.Records[0].Key[2:4]) == 0
}

// SortAborted sorts a fetch response's aborted transactions by their first
// offset, in place.
func SortAborted(a []*sarama.AbortedTransaction) {
	// insertion sort: the list is short and usually sorted already
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j].FirstOffset < a[j-1].FirstOffset; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}
