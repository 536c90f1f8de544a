// Package chart holds the results of `krole bench` and of its peers (the
// election benches under bench/: etcd, and in modules of their own under
// bench/zk and bench/kgroup, ZooKeeper and a Kafka consumer group), their
// summary statistics, the ratios of krole's figures to each peer's, and
// the SVG chart that draws their latency distributions, with the standard
// library only.
//
// A [Result] is the JSON object both benches print with -o json:
//
//	{"kind":K,"system":S,"samples_ms":[...],"min_ms":X,"median_ms":X,
//	 "p90_ms":X,"p99_ms":X,"max_ms":X,"settings":{...}}
//
// plus optional fields that only some kinds fill in (renewals_per_s,
// missed_deadlines, cpu_s_per_1000, past_deadline). Samples are in
// milliseconds, sorted ascending.
package chart

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
)

// Result is one bench run: one kind (failover, handover, acquire, renew)
// of one system (krole, etcd, zookeeper, consumer group).
type Result struct {
	Kind   string `json:"kind"`
	System string `json:"system,omitempty"`
	// Label, when set, names the run in text and charts instead of
	// System and Kind (two krole runs with different settings).
	Label     string    `json:"label,omitempty"`
	SamplesMS []float64 `json:"samples_ms"`
	Stats
	Settings map[string]any `json:"settings"`

	// PastDeadline (failover): how far past the dead holder's lease
	// deadline (the later of its lease's and of its member session's last
	// heartbeat's, which renewed it: GrantedAt + lease duration, on the
	// writer's clock) the new holder's lease write began.
	PastDeadline *Dist `json:"past_deadline,omitempty"`

	// Phases, when set, break each sample down: what part of it each
	// step took (see the kind's documentation), in milliseconds.
	Phases map[string]*Dist `json:"phases,omitempty"`

	// Rounds, when set, are each round's figures in the order they ran
	// (the samples and phases above are sorted, which loses which went
	// together).
	Rounds []map[string]float64 `json:"rounds,omitempty"`

	// Renew only.
	RenewalsPerS    *float64 `json:"renewals_per_s,omitempty"`
	MissedDeadlines *int     `json:"missed_deadlines,omitempty"`
	CPUSPer1000     *float64 `json:"cpu_s_per_1000,omitempty"`
	// ClusterCPUSPer1000 is the CPU of the process that runs the
	// embedded cluster (and the bench's view), per 1,000 renewals.
	ClusterCPUSPer1000 *float64 `json:"cluster_cpu_s_per_1000,omitempty"`
}

// Name is how text and charts name r: its Label, else its system and
// kind.
func (r Result) Name() string {
	switch {
	case r.Label != "":
		return r.Label
	case r.System != "":
		return r.System + " " + r.Kind
	}
	return r.Kind
}

// Stats are the summary statistics of a sample set, in milliseconds.
type Stats struct {
	MinMS    float64 `json:"min_ms"`
	MedianMS float64 `json:"median_ms"`
	P90MS    float64 `json:"p90_ms"`
	P99MS    float64 `json:"p99_ms"`
	MaxMS    float64 `json:"max_ms"`
}

// Dist is a sample set with its statistics.
type Dist struct {
	SamplesMS []float64 `json:"samples_ms"`
	Stats
}

// NewDist sorts samples (in place) and summarises them.
func NewDist(samples []float64) *Dist {
	return &Dist{SamplesMS: samples, Stats: Summarize(samples)}
}

// Summarize sorts samples in place and returns their statistics;
// percentiles are nearest-rank. No samples give zero statistics.
func Summarize(samples []float64) Stats {
	sort.Float64s(samples)
	if len(samples) == 0 {
		return Stats{}
	}
	return Stats{
		MinMS:    samples[0],
		MedianMS: Percentile(samples, 50),
		P90MS:    Percentile(samples, 90),
		P99MS:    Percentile(samples, 99),
		MaxMS:    samples[len(samples)-1],
	}
}

// Percentile is the nearest-rank p-th percentile of sorted (ascending),
// 0 for no samples.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

// Round3 rounds ms to microseconds, for output.
func Round3(ms float64) float64 { return math.Round(ms*1000) / 1000 }

// WriteText writes r for people: one line of statistics, and the extra
// figures of its kind.
func WriteText(w io.Writer, r Result) {
	name := r.Name()
	fmt.Fprintf(w, "%-16s n=%-5d min %s  median %s  p90 %s  p99 %s  max %s ms\n", name, len(r.SamplesMS),
		ms(r.MinMS), ms(r.MedianMS), ms(r.P90MS), ms(r.P99MS), ms(r.MaxMS))
	if d := r.PastDeadline; d != nil {
		fmt.Fprintf(w, "%-16s new holder acts past the dead lease's deadline: min %s  median %s  p90 %s  p99 %s  max %s ms\n", "",
			ms(d.MinMS), ms(d.MedianMS), ms(d.P90MS), ms(d.P99MS), ms(d.MaxMS))
	}
	phases := make([]string, 0, len(r.Phases))
	for k := range r.Phases {
		phases = append(phases, k)
	}
	sort.Strings(phases)
	for _, k := range phases {
		d := r.Phases[k]
		fmt.Fprintf(w, "%-16s phase %-22s median %s  p90 %s  p99 %s  max %s ms\n", "", k,
			ms(d.MedianMS), ms(d.P90MS), ms(d.P99MS), ms(d.MaxMS))
	}
	if r.RenewalsPerS != nil {
		fmt.Fprintf(w, "%-16s renewals/s %.1f  missed deadlines %d  member CPU %.3f s/1000 renewals",
			"", *r.RenewalsPerS, deref(r.MissedDeadlines), *r.CPUSPer1000)
		if r.ClusterCPUSPer1000 != nil {
			fmt.Fprintf(w, "  (cluster+bench process %.3f s/1000)", *r.ClusterCPUSPer1000)
		}
		fmt.Fprintln(w)
	}
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func ms(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// colors are the systems' colours; a system not named here takes the
// next of others, in the order the chart first meets it.
var (
	colors = map[string]string{"krole": "#1f77b4", "etcd": "#d62728", "zookeeper": "#2ca02c", "consumer group": "#9467bd"}
	others = []string{"#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}
)

// Layout of the chart, in pixels. The plot is plotW wide whatever the
// labels; the margin left of it grows to hold the longest row label.
const (
	minLeft, right, top, rowH, bottom = 170.0, 30.0, 50.0, 34.0, 50.0
	plotW                             = 700.0
	fontSize                          = 12.0
	labelGap                          = 8.0 // between a row label's end and the plot
	labelPad                          = 6.0 // left of the longest row label
)

// SVG writes a chart of the latency distributions of results: one row per
// result, grouped by kind in the order first seen, on a logarithmic
// millisecond axis. Each row shows every sample as a dot, a bar from the
// minimum to the maximum, a box from the median to p90 and a tick at p99,
// labelled with the median and p99. Any number of systems may appear;
// each has its colour.
func SVG(w io.Writer, title string, results []Result) error {
	// Order: by kind as first seen; within a kind, as given (krole first
	// when the caller lists it first).
	var kinds []string
	byKind := map[string][]Result{}
	for _, r := range results {
		if _, ok := byKind[r.Kind]; !ok {
			kinds = append(kinds, r.Kind)
		}
		byKind[r.Kind] = append(byKind[r.Kind], r)
	}
	var rows []Result
	for _, k := range kinds {
		rows = append(rows, byKind[k]...)
	}
	left := minLeft
	for _, r := range rows {
		left = math.Max(left, math.Ceil(labelPad+TextWidth(r.Name(), fontSize)+labelGap))
	}
	width := left + plotW + right
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		for _, s := range r.SamplesMS {
			if s > 0 {
				lo, hi = math.Min(lo, s), math.Max(hi, s)
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0.1, 10
	}
	minDec, maxDec := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if maxDec <= minDec {
		maxDec = minDec + 1
	}
	x := func(v float64) float64 {
		if v <= 0 {
			v = math.Pow(10, minDec)
		}
		return left + (math.Log10(v)-minDec)/(maxDec-minDec)*plotW
	}
	height := top + rowH*float64(len(rows)) + bottom
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="%.0f">`+"\n", width, height, width, height, fontSize)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", labelPad, esc(title))
	plotBottom := top + rowH*float64(len(rows))
	for d := minDec; d <= maxDec; d++ {
		for m := 1; m < 10; m++ {
			v := float64(m) * math.Pow(10, d)
			if d == maxDec && m > 1 {
				break
			}
			xx := x(v)
			stroke := "#eee"
			if m == 1 {
				stroke = "#bbb"
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%s</text>`+"\n", xx, plotBottom+16, axisLabel(v))
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", xx, top-6, xx, plotBottom, stroke)
		}
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">milliseconds (log scale): dots are samples, bar min–max, box median–p90, tick p99</text>`+"\n", left+plotW/2, plotBottom+36)
	color := map[string]string{}
	for _, r := range rows {
		if _, ok := color[r.System]; ok {
			continue
		}
		if c, ok := colors[r.System]; ok {
			color[r.System] = c
		} else {
			color[r.System] = others[(len(color))%len(others)]
		}
	}
	for i, r := range rows {
		y := top + rowH*float64(i) + rowH/2
		if i > 0 && rows[i-1].Kind != r.Kind {
			fmt.Fprintf(&b, `<line x1="10" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="4 3"/>`+"\n", y-rowH/2, width-right, y-rowH/2)
		}
		col := color[r.System]
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-labelGap, y+4, esc(r.Name()))
		if len(r.SamplesMS) == 0 {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`+"\n", x(r.MinMS), y, x(r.MaxMS), y, col)
		for j, s := range r.SamplesMS {
			jit := float64(j%5-2) * 2.5
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="1.6" fill="%s" fill-opacity="0.35"/>`+"\n", x(s), y+jit, col)
		}
		bx0, bx1 := x(r.MedianMS), x(r.P90MS)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="14" fill="%s" fill-opacity="0.25" stroke="%s"/>`+"\n", bx0, y-7, math.Max(bx1-bx0, 1.5), col, col)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", bx0, y-9, bx0, y+9, col)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", x(r.P99MS), y-6, x(r.P99MS), y+6, col)
		note := fmt.Sprintf("median %s, p99 %s ms", ms(r.MedianMS), ms(r.P99MS))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#333">%s</text>`+"\n", math.Min(x(r.MaxMS)+6, width-right-TextWidth(note, 10)), y-8, note)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// advance is, for each printable ASCII character from ' ', the larger of
// its advance widths in DejaVu Sans and Liberation Sans (metric-compatible
// with Arial and Helvetica), the fonts a viewer's "sans-serif" most often
// is, in thousandths of an em, rounded up.
var advance = [95]float64{
	318, 401, 460, 838, 637, 951, 780, 275, 391, 391, 500, 838, 318, 361, 318, 337,
	637, 637, 637, 637, 637, 637, 637, 637, 637, 637, 337, 337, 838, 838, 838, 557,
	1016, 685, 687, 723, 771, 667, 611, 778, 752, 295, 500, 667, 558, 863, 749, 788,
	667, 788, 723, 667, 611, 732, 685, 989, 686, 667, 686, 391, 337, 391, 838, 557,
	500, 613, 635, 550, 635, 616, 353, 635, 634, 278, 278, 580, 278, 975, 634, 612,
	635, 635, 412, 521, 393, 634, 592, 818, 592, 592, 525, 637, 337, 637, 838,
}

// TextWidth is an upper bound on the width of s drawn in a sans-serif
// font of size px: the wider of DejaVu Sans's and Liberation Sans's
// advances, plus 10 %; a character outside printable ASCII counts as
// 1.1 em.
func TextWidth(s string, px float64) float64 {
	var em float64
	for _, c := range s {
		if c >= ' ' && c <= '~' {
			em += advance[c-' '] / 1000
		} else {
			em++
		}
	}
	return em * px * 1.1
}

// Systems are the systems of results in the order first seen.
func Systems(results []Result) []string {
	var out []string
	for _, r := range results {
		if r.System != "" && !slices.Contains(out, r.System) {
			out = append(out, r.System)
		}
	}
	return out
}

// Title names the systems of results for a chart: "krole and etcd
// election, latency distributions", or with more systems "krole, etcd,
// zookeeper and consumer group election, ...".
func Title(results []Result) string {
	s := Systems(results)
	names := "election"
	switch len(s) {
	case 0:
	case 1:
		names = s[0] + " election"
	default:
		names = strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1] + " election"
	}
	return names + ", latency distributions"
}

// WriteRatios writes, for each peer system in results (every system but
// krole, in the order first seen), the ratios of each krole result's
// median, p90 and p99 to the peer's result of the same kind. A peer with
// more than one result of a kind gets a line for each, naming it.
func WriteRatios(w io.Writer, results []Result) {
	for _, peer := range Systems(results) {
		if peer == "krole" {
			continue
		}
		fmt.Fprintf(w, "ratios krole/%s (below 1: krole is faster):\n", peer)
		for _, k := range results {
			if k.System != "krole" {
				continue
			}
			var same []Result
			for _, p := range results {
				if p.System == peer && p.Kind == k.Kind && p.MedianMS != 0 && p.P90MS != 0 && p.P99MS != 0 {
					same = append(same, p)
				}
			}
			for _, p := range same {
				name := k.Name()
				if len(same) > 1 {
					name += " / " + p.Name()
				}
				fmt.Fprintf(w, "  %-34s median %.2f  p90 %.2f  p99 %.2f\n", name,
					k.MedianMS/p.MedianMS, k.P90MS/p.P90MS, k.P99MS/p.P99MS)
			}
		}
	}
}

func axisLabel(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("%g", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

func esc(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	return r.Replace(s)
}
