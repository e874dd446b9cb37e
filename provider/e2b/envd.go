package e2b

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strconv"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/apierr"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/ctxerr"
)

// processConfig is envd's process.ProcessConfig in proto3 JSON.
type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
}

// startRequest is envd's process.StartRequest.
type startRequest struct {
	Process processConfig `json:"process"`
	Tag     string        `json:"tag,omitempty"`
	Stdin   bool          `json:"stdin"`
}

// startResponse is envd's process.StartResponse: one ProcessEvent.
type startResponse struct {
	Event struct {
		Start *struct {
			PID uint32 `json:"pid"`
		} `json:"start"`
		Data *struct {
			Stdout []byte `json:"stdout"`
			Stderr []byte `json:"stderr"`
		} `json:"data"`
		End *struct {
			ExitCode int    `json:"exitCode"`
			Exited   bool   `json:"exited"`
			Status   string `json:"status"`
			Error    string `json:"error"`
		} `json:"end"`
	} `json:"event"`
}

// process starts pc in sandbox id as user through envd's process.Process/Start (a Connect
// server stream, JSON codec), as E2B's SDKs do. With wait it reads the stream to the process's
// end and returns its exit code and output; without, it returns once envd reports the process
// started, leaving it running (closing the stream does not stop it). token is the sandbox's
// envd access token, empty for a sandbox made without secure.
func (p *Provider) process(ctx context.Context, id, token string, pc processConfig, user, tag string, wait bool) (agentenv.ExecResult, error) {
	msg, err := json.Marshal(startRequest{Process: pc, Tag: tag})
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("encode process: %w", err)
	}
	var body bytes.Buffer
	cloudapi.WriteEnvelope(&body, msg) // a bytes.Buffer does not fail
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.SandboxURL(id, EnvdPort)+"/process.Process/Start", &body)
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("process request: %w", err)
	}
	req.Header.Set("Content-Type", cloudapi.ConnectStreamJSON)
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(EnvdPort))
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return agentenv.ExecResult{}, kind(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		err := &apierr.Error{Status: resp.StatusCode, Message: string(bytes.TrimSpace(b))}
		if resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusNotFound {
			// E2B's proxy answers so for a sandbox that no longer runs.
			return agentenv.ExecResult{}, fmt.Errorf("envd: %w: %w", agentenv.ErrGone, err)
		}
		return agentenv.ExecResult{}, fmt.Errorf("envd: %w", kind(err))
	}
	var res agentenv.ExecResult
	started := false
	r := bufio.NewReader(resp.Body)
	for {
		flags, data, err := cloudapi.ReadEnvelope(r)
		if err != nil {
			return res, fmt.Errorf("envd: read stream: %w", ctxerr.Prefer(ctx, err))
		}
		if flags&cloudapi.FlagEndStream != 0 {
			if err := cloudapi.EndStream(data); err != nil {
				return res, fmt.Errorf("envd: %w", err)
			}
			if !started || wait {
				return res, errors.New("envd: stream ended before the process did")
			}
			return res, nil
		}
		var ev startResponse
		if err := json.Unmarshal(data, &ev); err != nil {
			return res, fmt.Errorf("envd: decode event: %w", err)
		}
		switch e := ev.Event; {
		case e.Start != nil:
			started = true
			if !wait {
				return res, nil
			}
		case e.Data != nil:
			res.Stdout = append(res.Stdout, e.Data.Stdout...)
			res.Stderr = append(res.Stderr, e.Data.Stderr...)
		case e.End != nil:
			if e.End.Error != "" && !e.End.Exited {
				return res, fmt.Errorf("envd: process ended: %s", e.End.Error)
			}
			res.ExitCode = e.End.ExitCode
			return res, nil
		}
	}
}

// upload writes data to the absolute path name in sandbox id, owned by user, through envd's
// filesystem API: POST /files?path=…&username=… with the file as multipart form field "file",
// as E2B's SDKs' files.write does; data is streamed, so it may be an image archive. token is the
// sandbox's envd access token.
func (p *Provider) upload(ctx context.Context, id, token, name, user string, data io.Reader) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		fw, err := mw.CreateFormFile("file", path.Base(name))
		if err == nil {
			_, err = io.Copy(fw, data)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	defer pr.Close() // ends the writer if the request stops reading
	q := url.Values{"path": {name}, "username": {user}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.SandboxURL(id, EnvdPort)+"/files?"+q.Encode(), pr)
	if err != nil {
		return fmt.Errorf("upload request: %w", err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(EnvdPort))
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return fmt.Errorf("upload %s: %w", name, kind(err))
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusBadGateway:
		return fmt.Errorf("upload %s: %w: %w", name, agentenv.ErrGone, &apierr.Error{Status: resp.StatusCode, Message: string(bytes.TrimSpace(b))})
	default:
		return fmt.Errorf("upload %s: %w", name, kind(&apierr.Error{Status: resp.StatusCode, Message: string(bytes.TrimSpace(b))}))
	}
}
