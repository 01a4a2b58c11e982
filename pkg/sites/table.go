package sites

import (
	"fmt"
	"slices"
	"strings"
)

// Table is the sites every policy covers, and each policy's Budget.
type Table struct {
	exact map[string]*Budget
	// wild maps a wildcard's domain ("example.com" for *.example.com).
	wild    map[string]*Budget
	budgets []*Budget
	// Conflicts are the policies that lost a site to another (by name:
	// the first in name order keeps it), and why.
	Conflicts map[string]string
}

// NewTable builds the table of policies (invalid ones left out, in
// Conflicts). A site two policies name goes to the first by name.
func NewTable(policies []Policy) *Table {
	t := &Table{exact: map[string]*Budget{}, wild: map[string]*Budget{}, Conflicts: map[string]string{}}
	sorted := slices.Clone(policies)
	slices.SortFunc(sorted, func(a, b Policy) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range sorted {
		if err := p.Validate(); err != nil {
			t.Conflicts[p.Name] = err.Error()
			continue
		}
		b := newBudget(p)
		kept := false
		for _, s := range p.Sites {
			m, key := t.exact, s
			if d, ok := strings.CutPrefix(s, "*."); ok {
				m, key = t.wild, d
			}
			if other, taken := m[key]; taken && other != b {
				t.Conflicts[p.Name] = fmt.Sprintf("site %q is already SitePolicy %q's", s, other.policy.Name)
				continue
			}
			m[key] = b
			kept = true
		}
		if kept {
			t.budgets = append(t.budgets, b)
		}
	}
	return t
}

// For is the budget of the policy covering target's host: a policy that
// names the host, else the wildcard of its nearest parent domain; nil when
// none covers it.
func (t *Table) For(target string) *Budget {
	if t == nil || len(t.budgets) == 0 || target == "" {
		return nil
	}
	host := HostOf(target)
	if b := t.exact[host]; b != nil {
		return b
	}
	for d := host; ; {
		i := strings.IndexByte(d, '.')
		if i < 0 {
			return nil
		}
		d = d[i+1:]
		if b := t.wild[d]; b != nil {
			return b
		}
	}
}

// Budgets are the table's budgets, in policy name order.
func (t *Table) Budgets() []*Budget {
	if t == nil {
		return nil
	}
	return t.budgets
}

// Carry moves the adapted state of each budget of old to the budget of
// the same policy name in t, so that a policy's update does not reset its
// limit (clamped to the new floor and ceiling). Live leases are not
// carried: the store counts them again.
func (t *Table) Carry(old *Table) {
	if old == nil {
		return
	}
	byName := map[string]*Budget{}
	for _, b := range old.budgets {
		byName[b.policy.Name] = b
	}
	for _, b := range t.budgets {
		if o := byName[b.policy.Name]; o != nil {
			b.carry(o)
		}
	}
}
