package task

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle"
)

// deployVolume creates a volume through the lifecycle manager, which deploy_sandbox steps mount
// (volumes: [{volume: ID, path: ...}]) to share files. It is a record of the run, torn down with
// the episode after the sandboxes that mount it.
type deployVolume struct {
	Provider string `yaml:"provider"` // a provider with volumes; the run's --provider (its first member) if empty
	TTL      string `yaml:"ttl"`      // lifetime until gc may remove it; lifecycle's default if empty
}

func (s *deployVolume) Check() error {
	if s.TTL != "" {
		if d, err := time.ParseDuration(s.TTL); err != nil || d <= 0 {
			return fmt.Errorf("ttl: want a positive duration such as \"10m\", got %q", s.TTL)
		}
	}
	return nil
}

func (s *deployVolume) Refs() []Ref { return nil }

func (s *deployVolume) Run(ctx context.Context, sc *scope) (Result, error) {
	m := sc.e.r.Manager
	members, err := sc.providers(s.Provider)
	if err != nil {
		return Result{}, err
	}
	// A volume lives on one provider, and the sandboxes that mount it are made there.
	p := members[0]
	ok, err := m.Supports(p, agentenv.AbilityVolumes)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return Result{}, fmt.Errorf("provider %s has no volumes: run the task on one that has (docker): %w", p, agentenv.ErrInvalid)
	}
	ttl, _ := time.ParseDuration(s.TTL)
	rec, _, err := m.Create(ctx, lifecycle.CreateRequest{
		Provider: p, Kind: agentenv.KindVolume, Run: sc.e.id, Role: agentenv.TaskRole(sc.s.ID), TTL: ttl,
	})
	if err != nil {
		return Result{}, fmt.Errorf("volume: %w", err)
	}
	return Result{Outputs: map[string]string{"volume": rec.ID, "provider": rec.Provider}}, nil
}

// sandboxVolume is one of deploy_sandbox's volumes: a deploy_volume step's volume mounted into
// the sandbox.
type sandboxVolume struct {
	Volume   string `yaml:"volume" task:"required"` // the deploy_volume step
	Path     string `yaml:"path" task:"required"`   // where it is mounted: an absolute path
	ReadOnly bool   `yaml:"read_only"`              // the sandbox reads it and cannot write it
}

// checkVolumes checks deploy_sandbox's volumes: each a step and an absolute path, no path twice.
func checkVolumes(vols []sandboxVolume) error {
	for i, v := range vols {
		switch {
		case v.Volume == "":
			return fmt.Errorf("volumes[%d].volume: want a deploy_volume step", i)
		case !strings.HasPrefix(v.Path, "/") || path.Clean(v.Path) == "/":
			return fmt.Errorf("volumes[%d].path: want an absolute path other than /, got %q", i, v.Path)
		}
		for _, o := range vols[:i] {
			if path.Clean(o.Path) == path.Clean(v.Path) {
				return fmt.Errorf("volumes[%d].path: %q is mounted twice", i, v.Path)
			}
		}
	}
	return nil
}

// volumeRefs are the deploy_volume steps vols name.
func volumeRefs(vols []sandboxVolume) []Ref {
	var refs []Ref
	for i, v := range vols {
		refs = append(refs, Ref{fmt.Sprintf("volumes[%d].volume", i), v.Volume, []string{TypeDeployVolume}})
	}
	return refs
}

// mounts resolves vols to the volumes their steps made, and narrows members, the providers a
// sandbox may be made on, to the volumes' one: a sandbox mounts a volume of its own provider.
func (sc *scope) mounts(vols []sandboxVolume, members []string) ([]agentenv.Mount, []string, error) {
	var out []agentenv.Mount
	for i, v := range vols {
		st := sc.state(v.Volume)
		id, vp := st.outputs["volume"], st.outputs["provider"]
		if id == "" {
			return nil, nil, fmt.Errorf("volumes[%d]: step %s made no volume%s", i, v.Volume, sc.e.failureOf(v.Volume))
		}
		if !slices.Contains(members, vp) {
			return nil, nil, fmt.Errorf("volumes[%d]: step %s's volume is on provider %s, this sandbox on %s: a sandbox mounts a volume of its own provider only: %w", i, v.Volume, vp, strings.Join(members, ","), agentenv.ErrInvalid)
		}
		members = []string{vp}
		out = append(out, agentenv.Mount{Volume: id, Path: v.Path, ReadOnly: v.ReadOnly})
	}
	if len(out) > 0 {
		// Refused here, naming the step's field, rather than by the create.
		ok, err := sc.e.r.Manager.Supports(members[0], agentenv.AbilityVolumes)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, nil, fmt.Errorf("volumes: provider %s cannot mount volumes: run the task on one that can (docker): %w", members[0], agentenv.ErrInvalid)
		}
	}
	return out, members, nil
}
