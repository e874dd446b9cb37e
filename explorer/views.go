package explorer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/spec"
	"github.com/agentenv/agentenv/task"
)

// pageLimit is the default and maxLimit the largest page of a listing.
const (
	pageLimit = 50
	maxLimit  = 500
	// maxScan bounds how many runs one request reads to fill a page filtered by outcome.
	maxScan = 5000
	// maxTrajectory bounds how much of a trajectory file one request reads.
	maxTrajectory = 8 << 20
)

func limitOf(r *http.Request) int {
	n, err := strconv.Atoi(r.URL.Query().Get("limit"))
	if err != nil || n <= 0 {
		return pageLimit
	}
	return min(n, maxLimit)
}

// RunsPage is a page of the runs table.
type RunsPage struct {
	Runs    []Episode `json:"runs"`
	Next    string    `json:"next,omitempty"` // cursor of the next page
	Status  string    `json:"-"`
	Outcome string    `json:"-"`
	Task    string    `json:"-"`
	Query   string    `json:"-"`
}

// statusesOf maps an outcome filter to the run status that episodes with it have.
func statusesOf(outcome string) []string {
	if outcome == "" {
		return nil
	}
	return []string{string(task.Outcome(outcome).Status())}
}

func (x *Explorer) runsView(r *http.Request) (any, error) {
	q := r.URL.Query()
	v := RunsPage{Status: q.Get("status"), Outcome: q.Get("outcome"), Task: q.Get("task"), Query: q.Get("q"), Runs: []Episode{}}
	if v.Outcome != "" && !slices.Contains(outcomes(), v.Outcome) {
		return nil, fmt.Errorf("outcome %q: want one of %s: %w", v.Outcome, strings.Join(outcomes(), ", "), agentenv.ErrInvalid)
	}
	dq := agentenv.DocQuery{Text: v.Query, Cursor: q.Get("cursor")}
	if v.Status != "" {
		dq.States = []string{v.Status}
	}
	if st := statusesOf(v.Outcome); st != nil {
		if v.Status != "" && !slices.Contains(st, v.Status) {
			return v, nil
		}
		dq.States = st
	}
	if v.Task != "" {
		dq.Fields = map[string]string{"task": v.Task}
	}
	limit, scanned, now := limitOf(r), 0, time.Now()
	for len(v.Runs) < limit && scanned < maxScan {
		dq.Limit = limit - len(v.Runs)
		p, err := x.cfg.Ledger.Runs().Page(r.Context(), dq)
		if err != nil {
			return nil, err
		}
		scanned += len(p.Docs)
		for _, d := range p.Docs {
			if e := episodeOf(d, now); v.Outcome == "" || e.Outcome == v.Outcome {
				v.Runs = append(v.Runs, e)
			}
		}
		v.Next = p.Next
		if p.Next == "" {
			break
		}
		dq.Cursor = p.Next
	}
	return v, nil
}

// GroupsPage is a page of the groups table, with the runs this explorer started.
type GroupsPage struct {
	Groups []Group    `json:"groups"`
	Next   string     `json:"next,omitempty"`
	Live   []Progress `json:"live"`
	Start  bool       `json:"-"` // whether runs can be started here
}

func (x *Explorer) groupsView(r *http.Request) (any, error) {
	limit := min(limitOf(r), 25)
	if r.URL.Query().Get("limit") != "" {
		limit = limitOf(r)
	}
	gs, next, err := x.groups(r.Context(), r.URL.Query().Get("cursor"), limit)
	if err != nil {
		return nil, err
	}
	live := x.live.running()
	if live == nil {
		live = []Progress{}
	}
	if gs == nil {
		gs = []Group{}
	}
	return GroupsPage{Groups: gs, Next: next, Live: live, Start: x.cfg.Runner != nil}, nil
}

func (x *Explorer) groupView(r *http.Request) (any, error) {
	return x.group(r.Context(), r.PathValue("id"))
}

// StepView is one step of an episode, its outputs and its verifier rows split out.
type StepView struct {
	agentenv.StepRecord
	Duration   float64    `json:"duration_s"`
	Rows       []task.Row `json:"rows,omitempty"`
	Trajectory bool       `json:"trajectory"` // whether a trajectory file can be read
	Deployment string     `json:"deployment,omitempty"`
}

// Output is one step output, for display in order.
type Output struct{ Name, Value string }

// OutputList returns the outputs but rows, in name order.
func (s StepView) OutputList() []Output {
	var out []Output
	for k, v := range s.Outputs {
		if k != "rows" {
			out = append(out, Output{k, v})
		}
	}
	slices.SortFunc(out, func(a, b Output) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// RunView is an episode's page.
type RunView struct {
	Run         agentenv.Run   `json:"run"`
	Episode     Episode        `json:"episode"`
	Group       string         `json:"group"`
	Steps       []StepView     `json:"steps"`
	Deployments []string       `json:"deployments,omitempty"`
	Artifacts   []ArtifactLink `json:"artifacts,omitempty"`
	Cancellable bool           `json:"cancellable"`
}

// ArtifactLink is a file a collect_files step kept, with where the explorer serves it.
type ArtifactLink struct {
	Step string `json:"step"`
	task.Artifact
	URL string `json:"url"`
}

func (x *Explorer) runView(r *http.Request) (any, error) {
	ctx := r.Context()
	run, err := x.cfg.Ledger.Runs().Get(ctx, r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	g, err := x.groupOf(ctx, run)
	if err != nil {
		return nil, err
	}
	v := RunView{Run: run, Episode: episodeOf(run, time.Now()), Group: g}
	v.Cancellable = string(run.Status) == string(agentenv.RunRunning) && x.live.progress(g) != nil
	for _, s := range run.Steps {
		sv := StepView{StepRecord: s}
		if !s.Started.IsZero() && !s.Ended.IsZero() {
			sv.Duration = s.Ended.Sub(s.Started).Seconds()
		}
		if rows := s.Outputs["rows"]; rows != "" {
			_ = json.Unmarshal([]byte(rows), &sv.Rows)
		}
		if p := s.Outputs["trajectory"]; p != "" {
			_, err := x.trajectoryPath(p)
			sv.Trajectory = err == nil
		}
		for _, a := range task.Artifacts(s) {
			v.Artifacts = append(v.Artifacts, ArtifactLink{Step: s.ID, Artifact: a, URL: artifactURL(run.ID, a.Name)})
		}
		if d := s.Outputs["deployment_id"]; d != "" {
			sv.Deployment = d
			v.Deployments = append(v.Deployments, d)
		}
		v.Steps = append(v.Steps, sv)
	}
	return v, nil
}

// TrajectoryLine is one line of an agent's trajectory file (agent.Line), with its
// time since the first line.
type TrajectoryLine struct {
	agent.Line
	At float64 `json:"at_s"` // seconds since the first line
	// ImageURLs are where the explorer serves the line's images (a browser's screenshots).
	ImageURLs []string `json:"image_urls,omitempty"`
}

// Pretty returns raw JSON indented, for display.
func (TrajectoryLine) Pretty(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

// TrajectoryView is a trajectory's page.
type TrajectoryView struct {
	Run       string           `json:"run"`
	Task      string           `json:"task"`
	Step      string           `json:"step"`
	Lines     []TrajectoryLine `json:"lines"`
	ToolCalls int              `json:"tool_calls"`
	Truncated bool             `json:"truncated,omitempty"`
	// Gateway is what the gateway of each env of the run recorded of the tool calls (its
	// /trajectory, kept by the runner before the teardown), by the env's step.
	Gateway map[string][]GatewayCall `json:"gateway,omitempty"`
}

// GatewayCall is one tool call as a deployment's gateway recorded it.
type GatewayCall struct {
	envproto.CallRecord
	At float64 `json:"at_s"` // seconds since the agent trajectory's first line
}

// Pretty returns raw JSON indented, for display.
func (GatewayCall) Pretty(raw json.RawMessage) string { return TrajectoryLine{}.Pretty(raw) }

// gatewayCalls reads the gateway trajectories run kept, each file below RunsDir only.
func (x *Explorer) gatewayCalls(run agentenv.Run, start time.Time) map[string][]GatewayCall {
	out := map[string][]GatewayCall{}
	for k, p := range run.Attrs {
		step, ok := strings.CutPrefix(k, task.GatewayTrajectoryAttr)
		if !ok {
			continue
		}
		path, err := x.trajectoryPath(p)
		if err != nil {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		calls := []GatewayCall{}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), maxTrajectory)
		for sc.Scan() {
			var c GatewayCall
			if json.Unmarshal(sc.Bytes(), &c.CallRecord) != nil {
				continue
			}
			if !start.IsZero() && !c.Started.IsZero() {
				c.At = c.Started.Sub(start).Seconds()
			}
			calls = append(calls, c)
		}
		f.Close()
		out[step] = calls
	}
	return out
}

// trajectoryPath returns p when it is a file below RunsDir.
func (x *Explorer) trajectoryPath(p string) (string, error) {
	if x.cfg.RunsDir == "" {
		return "", fmt.Errorf("trajectory: no runs folder configured: %w", agentenv.ErrNotFound)
	}
	base, err := filepath.Abs(x.cfg.RunsDir)
	if err != nil {
		return "", fmt.Errorf("trajectory: %w", err)
	}
	clean := filepath.Clean(p)
	rel, err := filepath.Rel(base, clean)
	if err != nil || !filepath.IsAbs(clean) || rel == "." || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("trajectory %s: not below the runs folder %s: %w", p, base, agentenv.ErrNotFound)
	}
	return clean, nil
}

// artifactURL is where the explorer serves artifact name of run id.
func artifactURL(id, name string) string {
	return "/runs/" + url.PathEscape(id) + "/files/" + (&url.URL{Path: name}).EscapedPath()
}

// artifact serves a file a collect_files step of the run kept, by its stored name: only a
// name the run document lists, only from the run's own folder below RunsDir, and as a
// download, never rendered.
func (x *Explorer) artifact(w http.ResponseWriter, r *http.Request) {
	fail := func(err error) { writeJSON(w, statusOf(err), map[string]string{"error": err.Error()}) }
	run, err := x.cfg.Ledger.Runs().Get(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(err)
		return
	}
	name := r.PathValue("name")
	if !filepath.IsLocal(filepath.FromSlash(name)) || path.Clean(name) != name || strings.Contains(name, "\\") {
		fail(httpError{http.StatusBadRequest, fmt.Sprintf("artifact %q: not a name inside the run's folder", name)})
		return
	}
	listed := slices.ContainsFunc(run.Steps, func(s agentenv.StepRecord) bool {
		return slices.ContainsFunc(task.Artifacts(s), func(a task.Artifact) bool { return a.Name == name })
	})
	if !listed {
		fail(fmt.Errorf("run %s has no artifact %q: %w", run.ID, name, agentenv.ErrNotFound))
		return
	}
	p, err := x.trajectoryPath(filepath.Join(x.cfg.RunsDir, run.ID, filepath.FromSlash(name)))
	if err != nil {
		fail(err)
		return
	}
	f, err := os.Open(p)
	if err != nil {
		fail(fmt.Errorf("artifact %s: %w: %w", name, err, agentenv.ErrNotFound))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		fail(fmt.Errorf("artifact %s: not a file: %w", name, agentenv.ErrNotFound))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(name)}))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// trajectoryImage serves one image saved with a step's trajectory (agent.ImagesDir), by its
// file name: the trajectory's own folder of images only, and only the image types it keeps.
func (x *Explorer) trajectoryImage(w http.ResponseWriter, r *http.Request) {
	fail := func(err error) { writeJSON(w, statusOf(err), map[string]string{"error": err.Error()}) }
	run, err := x.cfg.Ledger.Runs().Get(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(err)
		return
	}
	step, name := r.PathValue("step"), r.PathValue("name")
	i := slices.IndexFunc(run.Steps, func(s agentenv.StepRecord) bool { return s.ID == step })
	ctype := map[string]string{".png": "image/png", ".jpg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp"}[filepath.Ext(name)]
	if i < 0 || run.Steps[i].Outputs["trajectory"] == "" || ctype == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
		fail(fmt.Errorf("run %s step %q has no image %q: %w", run.ID, step, name, agentenv.ErrNotFound))
		return
	}
	path, err := x.trajectoryPath(run.Steps[i].Outputs["trajectory"])
	if err != nil {
		fail(err)
		return
	}
	data, err := os.ReadFile(filepath.Join(agent.ImagesDir(path), name))
	if err != nil {
		fail(fmt.Errorf("image %s: %w: %w", name, err, agentenv.ErrNotFound))
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "private, max-age=3600")
	_, _ = w.Write(data)
}

func (x *Explorer) trajectoryView(r *http.Request) (any, error) {
	run, err := x.cfg.Ledger.Runs().Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	step := r.PathValue("step")
	i := slices.IndexFunc(run.Steps, func(s agentenv.StepRecord) bool { return s.ID == step })
	if i < 0 || run.Steps[i].Outputs["trajectory"] == "" {
		return nil, fmt.Errorf("run %s has no trajectory of step %q: %w", run.ID, step, agentenv.ErrNotFound)
	}
	path, err := x.trajectoryPath(run.Steps[i].Outputs["trajectory"])
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trajectory: %w: %w", err, agentenv.ErrNotFound)
	}
	defer f.Close()
	v := TrajectoryView{Run: run.ID, Task: run.Task, Step: step, Lines: []TrajectoryLine{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxTrajectory)
	read := 0
	for sc.Scan() {
		read += len(sc.Bytes())
		if read > maxTrajectory {
			v.Truncated = true
			break
		}
		var l TrajectoryLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			l = TrajectoryLine{Line: agent.Line{Kind: "unreadable", Text: sc.Text()}}
		}
		if len(v.Lines) > 0 && !l.Time.IsZero() {
			l.At = l.Time.Sub(v.Lines[0].Time).Seconds()
		}
		if l.Kind == "tool_call" {
			v.ToolCalls++
		}
		for _, im := range l.Images {
			l.ImageURLs = append(l.ImageURLs, "/runs/"+url.PathEscape(run.ID)+"/trajectory/"+url.PathEscape(step)+"/images/"+url.PathEscape(filepath.Base(filepath.FromSlash(im.Path))))
		}
		v.Lines = append(v.Lines, l)
	}
	if err := sc.Err(); err != nil {
		v.Truncated = true
	}
	var start time.Time
	if len(v.Lines) > 0 {
		start = v.Lines[0].Time
	}
	v.Gateway = x.gatewayCalls(run, start)
	return v, nil
}

// DeploymentsPage is a page of the deployments table.
type DeploymentsPage struct {
	Deployments []agentenv.Deployment `json:"deployments"`
	Next        string                `json:"next,omitempty"`
	State       string                `json:"-"`
}

func (x *Explorer) deploymentsView(r *http.Request) (any, error) {
	q := r.URL.Query()
	v := DeploymentsPage{State: q.Get("state")}
	dq := agentenv.DocQuery{Cursor: q.Get("cursor"), Limit: limitOf(r), Text: q.Get("q")}
	switch v.State {
	case "":
	case "current":
		dq.States = agentenv.DocStates(agentenv.DeploymentDeploying, agentenv.DeploymentLive)
	default:
		dq.States = []string{v.State}
	}
	p, err := x.cfg.Ledger.Deployments().Page(r.Context(), dq)
	if err != nil {
		return nil, err
	}
	v.Deployments, v.Next = p.Docs, p.Next
	if v.Deployments == nil {
		v.Deployments = []agentenv.Deployment{}
	}
	return v, nil
}

// SandboxHealth is one sandbox of a deployment with what its provider says of it.
type SandboxHealth struct {
	Record    string         `json:"record"`
	Role      string         `json:"role"`
	Kind      agentenv.Kind  `json:"kind"`
	Provider  string         `json:"provider"`
	SandboxID string         `json:"sandbox_id,omitempty"`
	State     agentenv.State `json:"state"`
	Health    string         `json:"health"`
	Image     string         `json:"image,omitempty"`
}

// DeploymentView is a deployment's page.
type DeploymentView struct {
	Deployment agentenv.Deployment `json:"deployment"`
	Sandboxes  []SandboxHealth     `json:"sandboxes"`
	Teardown   bool                `json:"can_teardown"`
	// Watch opens the browser's live screen, when a live deployment has one (browser.vnc).
	Watch *Watch `json:"watch,omitempty"`
}

// Watch is the form that opens a deployment's browser screen, noVNC through the gateway at
// /svc/browser-vnc/: a GET of Action with Params and the admin token the person types as
// watchTokenParam, which the gateway trades for a cookie of that route before the page loads.
type Watch struct {
	// URL is the noVNC page (spec.BrowserVNCPage under the gateway).
	URL string `json:"url"`
	// Action is URL without its query, which Params carry.
	Action string       `json:"action"`
	Params []WatchParam `json:"params"`
	// TokenParam is the name the admin token is sent under.
	TokenParam string `json:"token_param"`
}

// WatchParam is one query parameter of the noVNC page.
type WatchParam struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// watchTokenParam is the gateway's query parameter for the admin token on a /svc/ route
// (gateway.SvcTokenParam; the explorer does not link the gateway).
const watchTokenParam = "access_token"

// newWatch returns the form for the noVNC page at page, nil if it is not a URL.
func newWatch(page string) *Watch {
	u, err := url.Parse(page)
	if err != nil || u.Host == "" {
		return nil
	}
	w := &Watch{URL: page, Params: []WatchParam{}, TokenParam: watchTokenParam}
	q := u.Query()
	for _, k := range slices.Sorted(maps.Keys(q)) {
		for _, v := range q[k] {
			w.Params = append(w.Params, WatchParam{k, v})
		}
	}
	u.RawQuery = ""
	w.Action = u.String()
	return w
}

func (x *Explorer) deploymentView(r *http.Request) (any, error) {
	ctx := r.Context()
	d, err := x.cfg.Ledger.Deployments().Get(ctx, r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	recs, err := x.cfg.Ledger.List(ctx, agentenv.Filter{Deployment: d.ID})
	if err != nil {
		return nil, err
	}
	v := DeploymentView{Deployment: d, Sandboxes: []SandboxHealth{}}
	for _, rec := range recs {
		h := "-"
		if rec.State != agentenv.StateGone && x.cfg.Inventory != nil {
			hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			h = x.cfg.Inventory.Health(hctx, rec)
			cancel()
		}
		v.Sandboxes = append(v.Sandboxes, SandboxHealth{Record: rec.ID, Role: string(rec.Role), Kind: rec.Kind, Provider: rec.Provider,
			SandboxID: rec.SandboxID, State: rec.State, Health: h, Image: rec.Image})
	}
	v.Teardown = x.cfg.Deployer != nil && string(d.State) != "torn_down"
	if page := d.URLs[spec.BrowserVNCService]; page != "" && d.State == agentenv.DeploymentLive {
		v.Watch = newWatch(page)
	}
	return v, nil
}

// LedgerView is the ledger page: records not gone joined with the providers' listings, and
// what gc would collect.
type LedgerView struct {
	Sandboxes []Sandbox           `json:"sandboxes"`
	GC        *lifecycle.GCReport `json:"gc_dry_run,omitempty"`
	Errors    []string            `json:"errors,omitempty"`
	CanGC     bool                `json:"can_gc"`
}

func (x *Explorer) ledgerView(r *http.Request) (any, error) {
	ctx := r.Context()
	v := LedgerView{Sandboxes: []Sandbox{}, CanGC: x.cfg.Collector != nil}
	if x.cfg.Inventory != nil {
		sbs, err := x.cfg.Inventory.Sandboxes(ctx)
		if err != nil {
			v.Errors = append(v.Errors, "listing: "+err.Error())
		}
		v.Sandboxes = append(v.Sandboxes, sbs...)
	} else {
		recs, err := x.cfg.Ledger.List(ctx, agentenv.Filter{States: agentenv.NotGone()})
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			v.Sandboxes = append(v.Sandboxes, Sandbox{Record: rec.ID, Provider: rec.Provider, Kind: rec.Kind, State: rec.State,
				Status: "not listed", SandboxID: rec.SandboxID, Deployment: rec.Deployment, Run: rec.Run, Owner: rec.Owner.String(), Image: rec.Image, Error: rec.Error})
		}
	}
	if x.cfg.Collector != nil {
		rep, err := x.cfg.Collector.GC(ctx, lifecycle.GCOptions{DryRun: true})
		if err != nil {
			v.Errors = append(v.Errors, "gc --dry-run: "+err.Error())
		} else {
			v.GC = &rep
		}
	}
	return v, nil
}
