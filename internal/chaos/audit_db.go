package chaos

import (
	"sort"
)

// This file holds the audits of the rows the members write to PostgreSQL
// through package sqlfence: their commit order (db-order) and the holding
// each names (db-holding). docs/CHAOS.md, "db-order" and "db-holding",
// states the rules.

// auditRows: per role, in commit order (Row.Pos), no row of a smaller
// fencing number after a row of a larger one (db-order); and every row's
// number is the offset of the first committed lease of a holding of its
// member and token, a holding that was live when the row's transaction
// began: the member's own log shows it elected and not yet revoked (nor
// the process restarted), or no later holding of the role had written a
// lease yet (db-holding).
func auditRows(h History, add addFunc) {
	newest := map[string]Row{}
	for _, r := range h.Rows {
		if n, ok := newest[r.Role]; ok && r.Number < n.Number {
			add(KindDBOrder, r.Role, "row pos %d of %s under number %d (token %s, seq %d) committed after row pos %d of %s under number %d (token %s, seq %d)",
				r.Pos, r.Member, r.Number, r.Token(), r.Seq, n.Pos, n.Member, n.Number, n.Token(), n.Seq)
			continue
		}
		newest[r.Role] = r
	}

	// Per role, the first committed lease of each token, in offset order,
	// and the earliest batch timestamp of the first leases after each.
	type first struct {
		Lease
		later int64 // the earliest timestamp of a later holding's first lease
	}
	firsts := map[string][]first{}
	seen := map[roleToken]bool{}
	for _, l := range h.Leases {
		k := roleToken{l.Role, l.Token}
		if !seen[k] {
			seen[k] = true
			firsts[l.Role] = append(firsts[l.Role], first{Lease: l})
		}
	}
	for _, fs := range firsts {
		sort.Slice(fs, func(i, j int) bool { return fs[i].Offset < fs[j].Offset })
		later := int64(1) << 62
		for i := len(fs) - 1; i >= 0; i-- {
			fs[i].later = later
			later = min(later, fs[i].Timestamp)
		}
	}
	hs := holdings(h)
	for _, r := range h.Rows {
		fs := firsts[r.Role]
		i := sort.Search(len(fs), func(i int) bool { return fs[i].Offset >= r.Number })
		if i == len(fs) || fs[i].Offset != r.Number {
			add(KindDBHolding, r.Role, "row pos %d of %s under number %d (token %s, seq %d): no holding of the role has its first lease at offset %d",
				r.Pos, r.Member, r.Number, r.Token(), r.Seq, r.Number)
			continue
		}
		f := fs[i]
		if f.Member != r.Member || f.Token != r.Token() {
			add(KindDBHolding, r.Role, "row pos %d of %s under number %d (token %s, seq %d): the holding numbered %d is %s's under token %s",
				r.Pos, r.Member, r.Number, r.Token(), r.Seq, r.Number, f.Member, f.Token)
			continue
		}
		if r.Began < f.later {
			continue // no later holding had written its lease
		}
		live := false
		for _, hd := range hs {
			if hd.role == r.Role && hd.member == r.Member && hd.token == r.Token() && hd.from <= r.Began && r.Began <= hd.until {
				live = true
				break
			}
		}
		if !live {
			add(KindDBHolding, r.Role, "row pos %d of %s under number %d (token %s, seq %d) was begun at %s, when %s's log did not show the holding, and after a later holding's lease (%s)",
				r.Pos, r.Member, r.Number, r.Token(), r.Seq, stamp(r.Began), r.Member, stamp(f.later))
		}
	}
}
