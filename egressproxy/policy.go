package egressproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// PolicyPoll is how often a proxy with a Config.PolicyFile reads it.
const PolicyPoll = 100 * time.Millisecond

// Policy is what the proxy lets through in one phase of a task whose phases differ (Harbor's
// [agent] and [verifier] network_mode): every host (Any, a "public" phase), or the hosts of
// Allow (none: a "no-network" phase).
type Policy struct {
	ID    string   `json:"id"` // names one writing, which the proxy acknowledges
	Any   bool     `json:"any,omitempty"`
	Allow []string `json:"allow,omitempty"`
}

// ackFile is where the proxy acknowledges the policy of file: "ID ok", or "ID error: WHY".
func ackFile(file string) string { return file + ".applied" }

// WritePolicy writes pol to file, the Config.PolicyFile of a running proxy, and returns once the
// proxy has applied it (every tunnel it no longer allows closed), within ctx's deadline. An
// allowlist entry it cannot read is an error naming it, and nothing is written; a policy the
// proxy refused is an error saying why.
func WritePolicy(ctx context.Context, file string, pol Policy) error {
	if _, err := ParseAllowlist(pol.Allow); err != nil {
		return err
	}
	pol.ID = rand.Text()
	b, err := json.Marshal(pol)
	if err != nil {
		return fmt.Errorf("egress policy: %w", err)
	}
	if err := writeAtomic(file, b); err != nil {
		return fmt.Errorf("egress policy: %w", err)
	}
	tick := time.NewTicker(PolicyPoll / 5)
	defer tick.Stop()
	for {
		ack, _ := os.ReadFile(ackFile(file))
		if rest, ok := strings.CutPrefix(string(ack), pol.ID+" "); ok {
			if rest == "ok" {
				return nil
			}
			return fmt.Errorf("egress policy: the proxy refused it: %s", rest)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("egress policy: the proxy did not apply it: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// watch applies the policy file every PolicyPoll until ctx ends.
func (p *Proxy) watch(ctx context.Context) {
	tick := time.NewTicker(PolicyPoll)
	defer tick.Stop()
	for {
		p.reload()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// reload applies the policy file when it changed: the new allowlist decides every request from
// then on, each tunnel to a host it does not allow is closed, and the file's policy is
// acknowledged. A policy it cannot read is refused in the acknowledgement, and the proxy then
// allows nothing.
func (p *Proxy) reload() {
	b, err := os.ReadFile(p.cfg.PolicyFile)
	if err != nil || p.sameAsApplied(b) {
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			p.log.Warn("egress policy unreadable", "file", p.cfg.PolicyFile, "err", err)
		}
		return
	}
	var pol Policy
	var allow Allowlist // a policy that cannot be read lets nothing through
	err = json.Unmarshal(b, &pol)
	if err == nil && pol.Any {
		allow = AnyHost()
	} else if err == nil {
		if allow, err = ParseAllowlist(pol.Allow); err != nil {
			allow = Allowlist{}
		}
	}
	var closed int
	p.mu.Lock()
	p.allow, p.applied = allow, b
	for c, host := range p.open {
		if ok, _ := allow.Allows(host); !ok {
			c.Close()
			closed++
		}
	}
	p.mu.Unlock()
	ack := pol.ID + " ok"
	if err != nil {
		ack = fmt.Sprintf("%s error: %v", pol.ID, err)
		p.log.Warn("egress policy refused: nothing is allowed", "file", p.cfg.PolicyFile, "err", err)
	} else {
		p.log.Info("egress policy applied", "id", pol.ID, "any", pol.Any, "allow", pol.Allow, "tunnels_closed", closed)
	}
	if err := writeAtomic(ackFile(p.cfg.PolicyFile), []byte(ack)); err != nil {
		p.log.Warn("egress policy not acknowledged", "file", p.cfg.PolicyFile, "err", err)
	}
}

func (p *Proxy) sameAsApplied(b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied != nil && bytes.Equal(b, p.applied)
}

// writeAtomic writes b to file through a temporary file beside it, renamed into place, so that
// a reader sees the old content or the new, never a part.
func writeAtomic(file string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), file)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
