package explorer

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/lifecycle"
)

// actionTimeout bounds a teardown or a gc started from a page. They run on a detached context,
// so a browser that goes away does not stop them halfway.
const actionTimeout = 10 * time.Minute

// view computes what a page shows and the API returns.
type view func(r *http.Request) (any, error)

func (x *Explorer) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, v := range []struct {
		page, api, tmpl string
		fn              view
	}{
		{"/{$}", "/groups", "groups", x.groupsView},
		{"/groups/{id}", "/groups/{id}", "group", x.groupView},
		{"/runs", "/runs", "runs", x.runsView},
		{"/runs/{id}", "/runs/{id}", "run", x.runView},
		{"/runs/{id}/trajectory/{step}", "/runs/{id}/trajectory/{step}", "trajectory", x.trajectoryView},
		{"/deployments", "/deployments", "deployments", x.deploymentsView},
		{"/deployments/{id}", "/deployments/{id}", "deployment", x.deploymentView},
		{"/ledger", "/records", "ledger", x.ledgerView},
	} {
		mux.Handle("GET "+v.page, x.page(v.tmpl, v.fn))
		mux.Handle("GET /api/v1"+v.api, x.api(v.fn))
	}
	mux.HandleFunc("GET /runs/{id}/trajectory/{step}/images/{name}", x.trajectoryImage)
	mux.HandleFunc("GET /runs/{id}/files/{name...}", x.artifact)
	mux.Handle("GET /start", x.page("start", func(*http.Request) (any, error) {
		return struct{ Live []Progress }{x.live.running()}, nil
	}))
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(staticFS)))
	mux.HandleFunc("GET /api/v1/session", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"csrf": x.csrf, "csrf_header": csrfHeader})
	})
	mux.HandleFunc("GET /api/v1/events", x.live.serve)
	mux.Handle("POST /api/v1/runs", x.api(x.startRun))
	mux.Handle("POST /api/v1/groups/{id}/cancel", x.api(func(r *http.Request) (any, error) {
		// A cancel on workers returns once they tore its episodes down: bounded, and carried
		// through if the page goes away.
		ctx, cancel := cleanup.Context(r.Context(), actionTimeout)
		defer cancel()
		if err := x.live.cancel(ctx, r.PathValue("id")); err != nil {
			return nil, err
		}
		return map[string]any{"group": r.PathValue("id"), "cancelled": true}, nil
	}))
	mux.Handle("POST /api/v1/deployments/{id}/teardown", x.api(x.teardown))
	mux.Handle("POST /api/v1/gc", x.api(x.collect))
	return mux
}

// api answers with the view as JSON, or {"error": ...}.
func (x *Explorer) api(fn view) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := fn(r)
		if err != nil {
			if redirect(w, r, err, "/api/v1/groups/") {
				return
			}
			writeJSON(w, statusOf(err), map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// startRun starts the task the request names (JSON or a form) and returns its group id.
func (x *Explorer) startRun(r *http.Request) (any, error) {
	var req RunRequest
	if r.Header.Get("Content-Type") == "application/json" {
		if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20)).Decode(&req); err != nil {
			return nil, httpError{http.StatusBadRequest, "start: " + err.Error()}
		}
	} else {
		req.Task, req.Seeds, req.Provider = r.PostFormValue("task"), r.PostFormValue("seeds"), r.PostFormValue("provider")
		req.K, _ = strconv.Atoi(r.PostFormValue("k"))
		req.Concurrency, _ = strconv.Atoi(r.PostFormValue("concurrency"))
	}
	if req.K < 0 || req.Concurrency < 0 || req.K > 100_000 {
		return nil, httpError{http.StatusBadRequest, "start: k and concurrency must be positive"}
	}
	id, err := x.live.start(req)
	if err != nil {
		return nil, err
	}
	return map[string]string{"group": id, "url": "/groups/" + url.PathEscape(id)}, nil
}

func (x *Explorer) teardown(r *http.Request) (any, error) {
	if x.cfg.Deployer == nil {
		return nil, httpError{http.StatusNotImplemented, "this explorer cannot tear down deployments"}
	}
	id := r.PathValue("id")
	if _, err := x.cfg.Ledger.Deployments().Get(r.Context(), id); err != nil {
		return nil, err
	}
	ctx, cancel := cleanup.Context(r.Context(), actionTimeout)
	defer cancel()
	rc, err := x.cfg.Deployer.Teardown(ctx, id)
	out := map[string]any{"deployment": id, "receipt": rc, "clean": rc.Clean()}
	if err != nil {
		out["error"] = err.Error()
	}
	return out, nil
}

func (x *Explorer) collect(r *http.Request) (any, error) {
	if x.cfg.Collector == nil {
		return nil, httpError{http.StatusNotImplemented, "this explorer cannot run gc"}
	}
	ctx, cancel := cleanup.Context(r.Context(), actionTimeout)
	defer cancel()
	return x.cfg.Collector.GC(ctx, lifecycle.GCOptions{})
}
