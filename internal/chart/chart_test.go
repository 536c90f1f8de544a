package chart

import (
	"encoding/xml"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSummarize(t *testing.T) {
	s := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	st := Summarize(s)
	assert.Equal(t, []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, s, "sorted in place")
	assert.Equal(t, Stats{MinMS: 1, MedianMS: 5, P90MS: 9, P99MS: 10, MaxMS: 10}, st, "nearest rank")
	assert.Equal(t, Stats{}, Summarize(nil))
	assert.Equal(t, 7.0, Percentile([]float64{7}, 99))
}

func TestSVG(t *testing.T) {
	k := Result{Kind: "handover", System: "krole", SamplesMS: []float64{3, 1, 2}}
	k.Stats = Summarize(k.SamplesMS)
	e := Result{Kind: "handover", System: "etcd", SamplesMS: []float64{0.5, 400}}
	e.Stats = Summarize(e.SamplesMS)
	f := Result{Kind: "failover", Label: "krole <fast> & co", SamplesMS: []float64{2500}}
	f.Stats = Summarize(f.SamplesMS)
	var b strings.Builder
	require.NoError(t, SVG(&b, "a & b", []Result{k, f, e}))
	out := b.String()
	require.NoError(t, xml.Unmarshal([]byte(out), new(struct{})), "well-formed XML, names escaped")
	assert.Equal(t, 6, strings.Count(out, "<circle"), "one dot per sample")
	// Grouped by kind as first seen: krole's handover, then etcd's, then the failover.
	ik, ie, iF := strings.Index(out, ">krole handover<"), strings.Index(out, ">etcd handover<"), strings.Index(out, "krole &lt;fast&gt; &amp; co")
	require.True(t, ik > 0 && ie > 0 && iF > 0, out)
	assert.Less(t, ik, ie)
	assert.Less(t, ie, iF)
	// The axis spans every sample: from 0.1 ms to 10 s.
	assert.Contains(t, out, ">0.1<")
	assert.Contains(t, out, ">10000<")
}
