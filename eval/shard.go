package eval

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
)

// Shard is the part of a group's slots one process runs (`agentenv run --shard I/N`), so that
// N processes (a Slurm array, a Kubernetes Indexed Job) run one eval between them: the slots
// are numbered over the whole eval in slot order (task, instance, attempt) from 0, and shard I
// runs those whose number is I-1 mod N. The dealing depends only on the eval, so every process
// computes the same shares. The zero Shard is the whole group.
type Shard struct {
	I int `json:"i"` // 1-based
	N int `json:"n"`
}

// ParseShard reads "I/N" with 1 ≤ I ≤ N; an error wrapping agentenv.ErrInvalid otherwise.
func ParseShard(s string) (Shard, error) {
	is, ns, ok := strings.Cut(strings.TrimSpace(s), "/")
	i, err1 := strconv.Atoi(is)
	n, err2 := strconv.Atoi(ns)
	if !ok || err1 != nil || err2 != nil {
		return Shard{}, fmt.Errorf("shard %q: want I/N, such as 2/8: %w", s, agentenv.ErrInvalid)
	}
	if n < 1 || i < 1 || i > n {
		return Shard{}, fmt.Errorf("shard %q: want 1 ≤ I ≤ N: %w", s, agentenv.ErrInvalid)
	}
	return Shard{I: i, N: n}, nil
}

// IsZero reports whether s is the whole group (no --shard).
func (s Shard) IsZero() bool { return s.N == 0 }

// String is "I/N", or "" for the whole group.
func (s Shard) String() string {
	if s.IsZero() {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.I, s.N)
}

// Has reports whether the slot numbered index (from 0, in slot order over the whole eval) is
// dealt to s.
func (s Shard) Has(index int) bool { return s.N <= 1 || index%s.N == s.I-1 }

// SlotKeys returns the slots g runs, in slot order: every slot of its tasks, or, for a
// shard, those dealt to it.
func (g Group) SlotKeys() []SlotKey {
	var out []SlotKey
	n := 0
	for ti, t := range g.Tasks {
		for i := range t.Instances {
			for a := 1; a <= t.K; a++ {
				if g.Shard.Has(n) {
					out = append(out, SlotKey{ti, i, a})
				}
				n++
			}
		}
	}
	return out
}
