package soak

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
)

// Databases is a state store as soak reads it: the databases agentenv made on a PostgreSQL
// server, found by label. provider/pgstore's Provider is one.
type Databases interface {
	// List returns the databases that carry every one of labels.
	List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error)
	// Terminate drops database id; one already gone is no error.
	Terminate(ctx context.Context, id string) error
}

// WithStore returns e with the databases of store added, for soaks whose episodes take their
// service DB from a state store: List adds each database carrying the labels as "database
// NAME", so a round's count, and the check of its warnings, see a database left behind exactly
// as they see a container; RemoveAll drops them too. Templates and snapshots are left out: a
// deploy keeps a template on purpose (one per env digest, until deploy.TemplateTTL), and a
// snapshot until it is removed by name.
func WithStore(e Engine, store Databases) Engine { return storeEngine{Engine: e, store: store} }

type storeEngine struct {
	Engine
	store Databases
}

// List implements Engine.
func (s storeEngine) List(ctx context.Context, labels map[string]string) ([]Resource, error) {
	rs, err := s.Engine.List(ctx, labels)
	if err != nil {
		return nil, err
	}
	dbs, err := s.store.List(ctx, labels)
	if err != nil {
		return nil, fmt.Errorf("list store databases: %w", err)
	}
	for _, db := range dbs {
		if role := agentenv.Role(db.Labels[agentenv.LabelRole]); role == deploy.RoleTemplate || role == deploy.RoleSnapshot {
			continue
		}
		rs = append(rs, Resource{Kind: "database", ID: db.ID, Name: db.ID, Labels: db.Labels})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].String() < rs[j].String() })
	return rs, nil
}

// RemoveAll implements Engine: the engine's resources, then the databases.
func (s storeEngine) RemoveAll(ctx context.Context, labels map[string]string) error {
	errs := []error{s.Engine.RemoveAll(ctx, labels)}
	rs, err := s.List(ctx, labels)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, r := range rs {
		if r.Kind != "database" {
			continue
		}
		if err := s.store.Terminate(ctx, r.ID); err != nil {
			errs = append(errs, fmt.Errorf("drop %s: %w", r, err))
		}
	}
	return errors.Join(errs...)
}
