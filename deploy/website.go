package deploy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/spec"
)

// webCheck is one website container to ready: the component, the path on the gateway it is
// reached at (without the readiness path), and the website it belongs to.
type webCheck struct {
	comp    spec.Component
	website string
	prefix  string // /website/NAME or /svc/NAME-backend
	app     *spec.WebApp
}

// webChecks lists the website containers of the env as the gateway reaches them: what it
// serves at /website/NAME/, and a backend behind a frontend at /svc/NAME-backend/.
func (st *stack) webChecks() []webCheck {
	var out []webCheck
	for i := range st.env.Websites {
		w := &st.env.Websites[i]
		if w.Frontend == nil {
			out = append(out, webCheck{spec.Component{Role: agentenv.RoleWebsite, Name: w.Name}, w.Name, "/website/" + w.Name, &w.Backend})
			continue
		}
		out = append(out,
			webCheck{spec.Component{Role: agentenv.RoleWebsite, Name: w.BackendName()}, w.Name, "/svc/" + w.BackendName(), &w.Backend},
			webCheck{spec.Component{Role: agentenv.RoleWebsite, Name: w.Name}, w.Name, "/website/" + w.Name, w.Frontend})
	}
	return out
}

// websites waits, once the gateway is ready, until each website container answers its
// ready_path through the gateway within its ready_timeout (all at once), with the admin token:
// the containers are private, so the gateway is the only way to them, and the one the agent
// takes. A failure names the website and the container, with its last log lines.
func (st *stack) websites(ctx context.Context) error {
	if len(st.env.Websites) == 0 || !st.env.Gateway.On() {
		return nil // without a gateway each container was readied on its own port
	}
	checks := st.webChecks()
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, c.app.ReadyTimeout)
			defer cancel()
			probe := c.comp
			probe.ReadyPath, probe.Private = c.prefix+c.app.ReadyPath, true
			err := st.d.ready(st, wctx, probe, st.endpoints["gateway"])
			if err == nil {
				st.emit(c.comp, "ready", "through the gateway at "+c.prefix+"/")
				return
			}
			if ctx.Err() != nil {
				errs[i] = context.Cause(ctx)
				return
			}
			st.mu.Lock()
			rec := st.records[c.comp.Name]
			st.mu.Unlock()
			what := "website " + c.website
			if c.comp.Name != c.website {
				what += "'s backend " + c.comp.Name
			}
			errs[i] = fmt.Errorf("%s not ready within %s (GET %s): %w%s", what, c.app.ReadyTimeout, c.app.ReadyPath, err, st.logs(ctx, rec))
			st.emit(c.comp, "failed", errs[i].Error())
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// noRedirects makes a client return a redirect as the answer.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// waitWebsite waits until a GET of url answers 2xx or 3xx (a redirect is not followed), with
// token as the bearer if it is not "".
func waitWebsite(ctx context.Context, url, token string) error {
	client := &http.Client{CheckRedirect: noRedirects, Timeout: tryBound}
	return poll(ctx, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("answered %s", resp.Status)
		}
		return nil
	})
}

// websiteURLs adds each website's URL through the gateway to urls.
func (st *stack) websiteURLs(urls map[string]string) {
	if !st.env.Gateway.On() {
		return
	}
	for _, w := range st.env.Websites {
		urls[w.Name] = baseURL(st.endpoints["gateway"]) + "/website/" + w.Name + "/"
	}
}
