package tenki

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/ctxerr"
	"github.com/agentenv/agentenv/provider/tenki/internal/wire"
)

// Bounds of the data plane.
const (
	// planeWait bounds the wait for a session's data-plane route to serve (the SDKs' default).
	planeWait = time.Minute
	// renewBefore is how long before its expiry a credential is replaced.
	renewBefore = time.Minute
	// stdinChunk is the most stdin one Run frame carries, as the SDKs send it.
	stdinChunk = 32 << 10
)

// plane is a session's data plane: where it is served and the credential a call there carries.
type plane struct {
	endpoint   string
	credential string
	expires    time.Time // zero: the service gave no expiry
}

// header sets the credential (and the client's name) on a data-plane call.
func (pl plane) header(h http.Header) {
	h.Set(wire.HeaderSessionCert, pl.credential)
	h.Set(wire.HeaderClientFamily, ClientFamily)
	h.Set(wire.HeaderClientGeneration, wire.ClientGeneration)
}

// remember keeps the data plane a create or credential answer names, unless its route failed.
func (p *Provider) remember(id, endpoint string, cred *wire.SessionCredential, route wire.RouteStatus) bool {
	if endpoint == "" || cred == nil || cred.Credential == "" || route == wire.RouteFailed || route == wire.RouteNotReady {
		return false
	}
	pl := plane{endpoint: strings.TrimRight(endpoint, "/"), credential: cred.Credential}
	if cred.ExpiresAt != nil {
		pl.expires = *cred.ExpiresAt
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.planes[id] = pl
	return true
}

// planeOf returns session id's data plane: the one known while its credential has more than a
// minute left (unless fresh), else a new credential from CreateSessionCredential, asked again
// while the route is not ready yet, for at most planeWait.
func (p *Provider) planeOf(ctx context.Context, id string, fresh bool) (plane, error) {
	if !fresh {
		p.mu.Lock()
		pl, ok := p.planes[id]
		p.mu.Unlock()
		if ok && (pl.expires.IsZero() || time.Until(pl.expires) > renewBefore) {
			return pl, nil
		}
	}
	wctx, cancel := context.WithTimeout(ctx, planeWait)
	defer cancel()
	wait := 50 * time.Millisecond
	for {
		got, err := call(wctx, p, p.sessionCredential, &wire.SessionID{SessionID: id})
		if err != nil {
			return plane{}, fmt.Errorf("session credential: %w", ctxerr.Prefer(ctx, p.sessionErr(ctx, id, err)))
		}
		if got.RouteStatus == wire.RouteFailed {
			return plane{}, fmt.Errorf("session %s: its data-plane route failed: %w", id, agentenv.ErrUnavailable)
		}
		if p.remember(id, got.DataPlaneEndpoint, got.Credential, got.RouteStatus) {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.planes[id], nil
		}
		select {
		case <-wctx.Done():
			return plane{}, fmt.Errorf("session %s: data plane not ready within %s: %w", id, planeWait, ctxerr.Prefer(ctx, wctx.Err()))
		case <-time.After(wait):
		}
		wait = min(2*wait, 750*time.Millisecond)
	}
}

// sessionErr maps an error of session id's data plane (or of its credential): when it may mean
// the session is gone, GetSession tells, so that a call in an ended session is ErrGone and one
// in a session Tenki does not know ErrNotFound.
func (p *Provider) sessionErr(ctx context.Context, id string, err error) error {
	if ctx.Err() != nil {
		return kind(ctx, err)
	}
	switch connect.CodeOf(err) {
	case connect.CodeNotFound, connect.CodeFailedPrecondition, connect.CodeUnavailable, connect.CodeUnimplemented:
		s, gerr := p.session(ctx, id)
		switch {
		case errors.Is(gerr, agentenv.ErrNotFound):
			return fmt.Errorf("%w: %w: %w", agentenv.ErrNotFound, agentenv.ErrGone, err)
		case gerr == nil && stopped(s.State):
			return fmt.Errorf("session %s: %w: %w", s.State, agentenv.ErrGone, err)
		}
	}
	return kind(ctx, err)
}

// dataCall makes one unary call to session id's data plane, once more with a fresh credential
// if the first is refused as unauthenticated (an expired credential). The error is Connect's.
func dataCall[Req, Res any](ctx context.Context, p *Provider, id, procedure string, in *Req) (*Res, error) {
	for attempt := 0; ; attempt++ {
		pl, err := p.planeOf(ctx, id, attempt > 0)
		if err != nil {
			return nil, err
		}
		c := connect.NewClient[Req, Res](p.http, pl.endpoint+procedure, connect.WithCodec(wire.Codec{}))
		req := connect.NewRequest(in)
		pl.header(req.Header())
		resp, err := c.CallUnary(ctx, req)
		if err == nil {
			return resp.Msg, nil
		}
		if attempt > 0 || connect.CodeOf(err) != connect.CodeUnauthenticated {
			return nil, err
		}
	}
}

// run runs start in session id through the data plane's Run stream, stdin (if not nil) on its
// standard input, and waits for it to exit or ctx to end. A process killed by a signal has exit
// code 128+signal.
func (p *Provider) run(ctx context.Context, id string, start wire.RunStart, stdin io.Reader) (agentenv.ExecResult, error) {
	if len(start.Cmd) == 0 || start.Cmd[0] == "" {
		return agentenv.ExecResult{}, fmt.Errorf("empty command: %w", agentenv.ErrInvalid)
	}
	start.SessionID, start.StreamStdin = id, true
	for attempt := 0; ; attempt++ {
		pl, err := p.planeOf(ctx, id, attempt > 0)
		if err != nil {
			return agentenv.ExecResult{}, err
		}
		res, started, err := p.runOnce(ctx, pl, start, stdin)
		if err == nil {
			return res, nil
		}
		if started || attempt > 0 || connect.CodeOf(err) != connect.CodeUnauthenticated {
			return res, ctxerr.Prefer(ctx, p.sessionErr(ctx, id, err))
		}
	}
}

// runOnce is one Run stream: the start, the first frame (started, or an exit saying why not),
// stdin pumped beside the output, and the exit. started says whether the process ran (and so
// whether stdin was read).
func (p *Provider) runOnce(ctx context.Context, pl plane, start wire.RunStart, stdin io.Reader) (agentenv.ExecResult, bool, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := connect.NewClient[wire.RunCall, wire.RunAnswer](p.http, pl.endpoint+wire.Run, connect.WithCodec(wire.Codec{}))
	st := c.CallBidiStream(sctx)
	pl.header(st.RequestHeader())
	defer st.CloseResponse()
	res := agentenv.ExecResult{ExitCode: -1}
	if err := st.Send(&wire.RunCall{Frame: &wire.RunRequest{Start: &start}}); err != nil && !errors.Is(err, io.EOF) {
		return res, false, err
	}
	first, err := st.Receive()
	if err != nil {
		return res, false, err
	}
	if f := first.Frame; f == nil || f.Started == nil {
		reason := "no started frame"
		if f != nil && f.Exit != nil {
			reason = f.Exit.Reason
		}
		return res, false, fmt.Errorf("run %s: did not start: %s: %w", start.Cmd[0], reason, agentenv.ErrUnavailable)
	}
	pumped := make(chan error, 1)
	go func() { pumped <- pumpStdin(st, stdin) }()
	defer func() {
		select {
		case <-pumped:
		default:
			cancel() // the process exited without reading all its stdin
			<-pumped
		}
	}()
	for {
		msg, err := st.Receive()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("run: stream ended before the process did")
			}
			return res, true, err
		}
		f := msg.Frame
		if f == nil {
			continue
		}
		res.Stdout = append(res.Stdout, f.Stdout...)
		res.Stderr = append(res.Stderr, f.Stderr...)
		if f.Exit != nil {
			res.ExitCode = int(f.Exit.ExitCode)
			if f.Exit.Signal != "" && f.Exit.ExitCode == 0 {
				res.ExitCode = 128 + signalNumber(f.Exit.Signal)
			}
			if err := st.CloseRequest(); err != nil && !errors.Is(err, io.EOF) {
				p.log.Debug("close a run stream", "err", err)
			}
			return res, true, nil
		}
	}
}

// pumpStdin sends what r reads as stdin frames, then the end of stdin.
func pumpStdin(st *connect.BidiStreamForClient[wire.RunCall, wire.RunAnswer], r io.Reader) error {
	if r != nil {
		buf := make([]byte, stdinChunk)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if serr := st.Send(&wire.RunCall{Frame: &wire.RunRequest{Stdin: append([]byte(nil), buf[:n]...)}}); serr != nil {
					return serr
				}
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
		}
	}
	return st.Send(&wire.RunCall{Frame: &wire.RunRequest{StdinClose: true}})
}

// signalNumber is the number of a signal the guest agent names ("SIGKILL" or "KILL"), 9 for
// one it does not know (the process was killed).
func signalNumber(name string) int {
	n, ok := map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "ABRT": 6, "KILL": 9, "SEGV": 11, "PIPE": 13, "ALRM": 14, "TERM": 15}[strings.TrimPrefix(strings.ToUpper(name), "SIG")]
	if !ok {
		return 9
	}
	return n
}

// Exec implements agentenv.Execer through the data plane's Run, as root (as a container's
// command runs). A session that has ended is ErrGone; one Tenki does not know, ErrNotFound.
func (p *Provider) Exec(ctx context.Context, id string, argv []string) (agentenv.ExecResult, error) {
	res, err := p.run(ctx, id, wire.RunStart{Cmd: argv, Privileged: true}, nil)
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("tenki: exec in %s: %w", id, err)
	}
	return res, nil
}

// WriteFile implements agentenv.Files with the data plane's WriteFile (the whole file in one
// message).
func (p *Provider) WriteFile(ctx context.Context, id, path string, data []byte) error {
	if err := p.writeFile(ctx, id, path, data); err != nil {
		return fmt.Errorf("tenki: write %s in %s: %w", path, id, err)
	}
	return nil
}

func (p *Provider) writeFile(ctx context.Context, id, path string, data []byte) error {
	if !strings.HasPrefix(path, "/") {
		return fmt.Errorf("path %q: want an absolute path: %w", path, agentenv.ErrInvalid)
	}
	in := wire.WriteFileCall{Request: &wire.WriteFileRequest{SessionID: id, Path: path, Content: data}}
	if _, err := dataCall[wire.WriteFileCall, wire.WriteFileAnswer](ctx, p, id, wire.WriteFile, &in); err != nil {
		return ctxerr.Prefer(ctx, p.sessionErr(ctx, id, err))
	}
	return nil
}

// ReadFile implements agentenv.Files with the data plane's ReadFile; a missing file (NotFound,
// "no such file or directory", as the SDKs tell it) is ErrNotFound.
func (p *Provider) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("tenki: read %s in %s: want an absolute path: %w", path, id, agentenv.ErrInvalid)
	}
	in := wire.ReadFileCall{Request: &wire.ReadFileRequest{SessionID: id, Path: path}}
	got, err := dataCall[wire.ReadFileCall, wire.ReadFileAnswer](ctx, p, id, wire.ReadFile, &in)
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() == connect.CodeNotFound && strings.Contains(strings.ToLower(ce.Message()), "no such file") {
			return nil, fmt.Errorf("tenki: read %s in %s: no such file: %w", path, id, agentenv.ErrNotFound)
		}
		return nil, fmt.Errorf("tenki: read %s in %s: %w", path, id, ctxerr.Prefer(ctx, p.sessionErr(ctx, id, err)))
	}
	if got.Response == nil {
		return []byte{}, nil
	}
	return got.Response.Content, nil
}
