package eval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle"
)

// Source is a shard group to merge and the ledger that holds it.
type Source struct {
	Group  Group
	Ledger agentenv.Ledger
}

// MergedID returns the id of the group that merging the groups ids makes. It depends only on
// the set of ids, so that a merge cut short and run again finishes the same group, and a
// second merge of the same shards finds the first one's.
func MergedID(ids []string) string {
	s := slices.Clone(ids)
	slices.Sort(s)
	sum := sha256.Sum256([]byte(strings.Join(s, "\n")))
	return "group-" + hex.EncodeToString(sum[:6])
}

// CheckShards reports why groups are not the complete set of finished shards of one eval
// that merge into the group into: a group that is no shard, or of another eval (digests,
// tasks, k, instances), another N, a shard given twice, one not finished (running,
// interrupted, cancelled), one merged into another group, and the shards missing. Every
// reason comes at once, each wrapping agentenv.ErrInvalid.
func CheckShards(groups []Group, into string) error {
	if len(groups) == 0 {
		return fmt.Errorf("merge: no groups: %w", agentenv.ErrInvalid)
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format+": %w", append(args, agentenv.ErrInvalid)...))
	}
	var first *Group
	byI := map[int]string{}
	for i := range groups {
		g := &groups[i]
		if g.Shard.IsZero() {
			bad("group %s is not a shard (run with --shard I/N)", g.ID)
			continue
		}
		if first == nil {
			first = g
		} else {
			if g.Shard.N != first.Shard.N {
				bad("group %s is shard %s, group %s is of %d shards", g.ID, g.Shard, first.ID, first.Shard.N)
				continue
			}
			if why := sameEval(*first, *g); why != "" {
				bad("group %s is not of the eval group %s ran: %s", g.ID, first.ID, why)
			}
		}
		if other, ok := byI[g.Shard.I]; ok {
			bad("shard %s is given twice: groups %s and %s", g.Shard, other, g.ID)
		}
		byI[g.Shard.I] = g.ID
		if g.MergedInto != "" && g.MergedInto != into {
			bad("group %s (shard %s) was merged into group %s already", g.ID, g.Shard, g.MergedInto)
		}
		switch {
		case g.Status == agentenv.RunCompleted:
		case g.Status == agentenv.RunRunning && Alive(*g):
			bad("group %s (shard %s) is still running", g.ID, g.Shard)
		default:
			why := string(g.Status)
			if g.Status == agentenv.RunRunning {
				why = "interrupted"
			} else if g.Error != "" {
				why += " (" + g.Error + ")"
			}
			bad("group %s (shard %s) did not finish: %s; finish it with agentenv run --resume %s", g.ID, g.Shard, why, g.ID)
		}
	}
	if first != nil {
		var missing []string
		for i := 1; i <= first.Shard.N; i++ {
			if _, ok := byI[i]; !ok {
				missing = append(missing, Shard{I: i, N: first.Shard.N}.String())
			}
		}
		if len(missing) > 0 {
			bad("missing shards %s of %s (run them with agentenv run %s --shard I/N, then merge every shard's group)",
				strings.Join(missing, ", "), first.Name, first.File)
		}
	}
	return errors.Join(errs...)
}

// sameEval says how b's eval differs from a's, or "" if they ran the same eval file and tasks.
func sameEval(a, b Group) string {
	if a.Digest != b.Digest {
		return fmt.Sprintf("eval file digest %s, not %s", orNone(b.Digest), orNone(a.Digest))
	}
	if len(a.Tasks) != len(b.Tasks) {
		return fmt.Sprintf("%d tasks, not %d", len(b.Tasks), len(a.Tasks))
	}
	for i, at := range a.Tasks {
		bt := b.Tasks[i]
		switch {
		case at.Task != bt.Task || at.Digest != bt.Digest:
			return fmt.Sprintf("task %d is %s (%s), not %s (%s)", i, bt.Task, bt.Digest, at.Task, at.Digest)
		case at.K != bt.K || at.Instances != bt.Instances:
			return fmt.Sprintf("task %s has k %d × %d instances, not k %d × %d", at.Task, bt.K, bt.Instances, at.K, at.Instances)
		}
		ao, _ := json.Marshal(at.Overrides)
		bo, _ := json.Marshal(bt.Overrides)
		if string(ao) != string(bo) {
			return fmt.Sprintf("task %s has overrides %s, not %s", at.Task, bo, ao)
		}
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Merge joins shards, the groups of one eval's `--shard I/N` runs, into one group written to
// dst, whose summary is that of the eval run unsharded. No sandbox is copied: each shard's
// episode run documents are re-pointed to the merged group (attrs.group, with the shard's id
// kept in attrs.shard_group), and each shard's document is marked merged_into it; a shard from
// another ledger has its documents written into dst that way, and its own ledger is only
// read. The merged group's id is MergedID of the shards' ids, so a merge cut short is
// finished by running it again, and merging the same shards again returns the merged group
// with already true and writes nothing. Bad shards (CheckShards) are an error wrapping
// agentenv.ErrInvalid before anything is written.
func Merge(ctx context.Context, dst agentenv.Ledger, shards []Source) (Group, bool, error) {
	ids := make([]string, len(shards))
	groups := make([]Group, len(shards))
	for i, s := range shards {
		ids[i], groups[i] = s.Group.ID, s.Group
	}
	into := MergedID(ids)
	if err := CheckShards(groups, into); err != nil {
		return Group{}, false, err
	}
	st := Store{Ledger: dst}
	if m, err := st.Get(ctx, into); err == nil && m.Status == agentenv.RunCompleted && len(m.MergedFrom) == len(ids) &&
		!slices.ContainsFunc(ids, func(id string) bool { return !slices.Contains(m.MergedFrom, id) }) {
		return m, true, nil
	} else if err != nil && !errors.Is(err, agentenv.ErrNotFound) {
		return Group{}, false, fmt.Errorf("merge: %w", err)
	}
	shards = slices.Clone(shards)
	slices.SortFunc(shards, func(a, b Source) int { return a.Group.Shard.I - b.Group.Shard.I })
	first := shards[0].Group
	owner, err := lifecycle.CurrentOwner()
	if err != nil {
		return Group{}, false, err
	}
	m := Group{ID: into, Name: first.Name, File: first.File, Digest: first.Digest, Tasks: first.Tasks,
		Status: agentenv.RunRunning, Owner: owner, Created: first.Created}
	for _, s := range shards {
		m.MergedFrom = append(m.MergedFrom, s.Group.ID)
		m.Concurrency = max(m.Concurrency, s.Group.Concurrency)
		if s.Group.Created.Before(m.Created) {
			m.Created = s.Group.Created
		}
		if s.Group.Ended.After(m.Ended) {
			m.Ended = s.Group.Ended
		}
	}
	if err := st.Put(ctx, m); err != nil {
		return Group{}, false, fmt.Errorf("merge: %w", err)
	}
	for _, s := range shards {
		// Those still pointing at the shard: all of them, unless a merge cut short moved some.
		runs, err := Store{Ledger: s.Ledger}.episodes(ctx, s.Group.ID, false)
		if err != nil {
			return Group{}, false, fmt.Errorf("merge: %w", err)
		}
		for _, r := range runs {
			if r.Attrs == nil {
				r.Attrs = map[string]string{}
			}
			r.Attrs[AttrGroup], r.Attrs[AttrShardGroup] = into, s.Group.ID
			if err := dst.Runs().Put(ctx, r); err != nil {
				return Group{}, false, fmt.Errorf("merge: re-point run %s: %w", r.ID, err)
			}
		}
		sg := s.Group
		sg.MergedInto = into
		if err := st.Put(ctx, sg); err != nil {
			return Group{}, false, fmt.Errorf("merge: %w", err)
		}
	}
	m.Status, m.Owner = agentenv.RunCompleted, agentenv.Owner{}
	if m.Ended.IsZero() {
		m.Ended = time.Now().UTC()
	}
	if err := st.Put(ctx, m); err != nil {
		return Group{}, false, fmt.Errorf("merge: %w", err)
	}
	return m, false, nil
}
