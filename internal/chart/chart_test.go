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

// TestSVGLabelsFit: no row label reaches past the chart's left edge, at
// the widths the fonts that most often stand for "sans-serif" draw it;
// the plot keeps its width whatever the labels.
func TestSVGLabelsFit(t *testing.T) {
	labels := []string{"krole handover, no command", "krole failover default RI", "consumer group failover",
		"zookeeper handover", "etcd acquire", "a label of the kind nobody would write, WWWWW mmmmm"}
	var results []Result
	for i, l := range labels {
		r := Result{Kind: "handover", System: []string{"krole", "etcd", "zookeeper", "consumer group"}[i%4], Label: l, SamplesMS: []float64{1, 2, 3000}}
		r.Stats = Summarize(r.SamplesMS)
		results = append(results, r)
	}
	var b strings.Builder
	require.NoError(t, SVG(&b, Title(results), results))
	var doc struct {
		Width float64 `xml:"width,attr"`
		Text  []struct {
			X      float64 `xml:"x,attr"`
			Anchor string  `xml:"text-anchor,attr"`
			Size   float64 `xml:"font-size,attr"`
			Body   string  `xml:",chardata"`
		} `xml:"text"`
	}
	require.NoError(t, xml.Unmarshal([]byte(b.String()), &doc))
	seen := 0
	var axis []float64
	for _, tx := range doc.Text {
		size := tx.Size
		if size == 0 {
			size = fontSize
		}
		w := TextWidth(tx.Body, size)
		switch tx.Anchor {
		case "end":
			seen++
			assert.GreaterOrEqual(t, tx.X-w, 0.0, "row label %q starts left of the chart", tx.Body)
		case "middle":
			axis = append(axis, tx.X)
		case "":
			assert.LessOrEqual(t, tx.X+w, doc.Width, "text %q ends right of the chart", tx.Body)
		}
	}
	assert.Equal(t, len(labels), seen, "one row label per result")
	// The axis labels (and the caption below them, in the middle) span
	// the plot: 1 ms to 10 s, plotW wide.
	require.GreaterOrEqual(t, len(axis), 2)
	assert.InDelta(t, plotW, axis[len(axis)-2]-axis[0], 0.2)

	// TextWidth is no narrower than DejaVu Sans and Liberation Sans draw
	// these at 12 px (measured from the fonts' files).
	for s, measured := range map[string]float64{
		"krole handover, no command": 176.34, // DejaVu Sans; Liberation Sans 153.62
		"consumer group failover":    146.50, // 128.72
		"WWW mmm @@@":                114.27, // 107.20
	} {
		assert.GreaterOrEqual(t, TextWidth(s, 12), measured, s)
	}
}

// TestRatios: krole's results against each peer's of the same kind, one
// block per peer in the order first seen.
func TestRatios(t *testing.T) {
	mk := func(system, kind, label string, median float64) Result {
		r := Result{Kind: kind, System: system, Label: label, SamplesMS: []float64{median}}
		r.Stats = Summarize(r.SamplesMS)
		return r
	}
	results := []Result{
		mk("krole", "handover", "", 4), mk("krole", "failover", "", 2000), mk("etcd", "handover", "", 2),
		mk("zookeeper", "handover", "", 8), mk("zookeeper", "failover", "", 4000), mk("consumer group", "failover", "a", 1000),
		mk("consumer group", "failover", "b", 500),
	}
	var b strings.Builder
	WriteRatios(&b, results)
	assert.Equal(t, `ratios krole/etcd (below 1: krole is faster):
  krole handover                     median 2.00  p90 2.00  p99 2.00
ratios krole/zookeeper (below 1: krole is faster):
  krole handover                     median 0.50  p90 0.50  p99 0.50
  krole failover                     median 0.50  p90 0.50  p99 0.50
ratios krole/consumer group (below 1: krole is faster):
  krole failover / a                 median 2.00  p90 2.00  p99 2.00
  krole failover / b                 median 4.00  p90 4.00  p99 4.00
`, b.String())
	assert.Equal(t, "krole, etcd, zookeeper and consumer group election, latency distributions", Title(results))
	assert.Equal(t, "krole and etcd election, latency distributions", Title(results[:3]))
}
