//go:build integration

package main_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestUIStartedRunIsAGroup: a run started from the explorer's start button (its API, as the
// page calls it) is a group like any `agentenv run`: `runs ls --group` lists it, `runs get`
// shows its episodes, and the explorer's group page is reached from the answer's url.
func TestUIStartedRunIsAGroup(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	base := c.startUI()

	getJSON := func(path string, out any) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	var session struct{ CSRF, CSRFHeader string }
	getJSON("/api/v1/session", &struct {
		CSRF       *string `json:"csrf"`
		CSRFHeader *string `json:"csrf_header"`
	}{&session.CSRF, &session.CSRFHeader})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/api/v1/runs", strings.NewReader(`{"task": "hello", "k": 2}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set(session.CSRFHeader, session.CSRF)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var started struct{ Group, URL string }
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &started) != nil || started.URL == "" {
		t.Fatalf("POST /api/v1/runs = %s %s", resp.Status, body)
	}

	// The run is a group of the ledger: wait until it ends, as runs ls --group shows it.
	var groups []struct{ ID, Name, Status string }
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		ls := c.run(t.Context(), nil, "runs", "ls", "--group", "--json")
		groups = nil
		if err := json.Unmarshal([]byte(ls.stdout), &groups); err != nil {
			t.Fatalf("runs ls --group --json: %v\n%s%s", err, ls.stdout, ls.stderr)
		}
		if len(groups) == 1 && groups[0].Status != "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs ls --group after a minute: %+v, want the explorer's run ended", groups)
		}
	}
	if g := groups[0]; g.Name != "hello" || g.Status != "completed" {
		t.Errorf("runs ls --group = %+v, want the hello group completed", g)
	}
	get := c.run(t.Context(), nil, "runs", "get", groups[0].ID)
	if get.code != 0 || strings.Count(get.stdout, "passed") < 2 {
		t.Errorf("runs get %s: exit %d, want two episodes passed:\n%s%s", groups[0].ID, get.code, get.stdout, get.stderr)
	}
	page, err := http.Get(base + started.URL)
	if err != nil {
		t.Fatal(err)
	}
	html, _ := io.ReadAll(page.Body)
	page.Body.Close()
	if page.StatusCode != http.StatusOK || !strings.Contains(string(html), groups[0].ID) {
		t.Errorf("GET %s = %s, want the group page of %s", started.URL, page.Status, groups[0].ID)
	}
}
