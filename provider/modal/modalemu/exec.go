package modalemu

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// I6PNHost is the name a Modal container resolves to its own i6pn address
// (https://modal.com/docs/guide/private-networking).
const I6PNHost = "i6pn.modal.local"

// execution is one exec: its outcome once done is closed, and for a command that runs in a VM
// its stdin.
type execution struct {
	done           chan struct{} // closed once stdout, stderr and code are final
	stdout, stderr []byte
	code           int32

	inMu     sync.Mutex
	stdin    *io.PipeWriter // VM: the command's stdin; nil for an answered exec
	written  uint64         // bytes of stdin written
	inClosed bool
}

// finished returns an execution that is already over.
func finished(stdout, stderr []byte, code int32) *execution {
	ex := &execution{done: make(chan struct{}), stdout: stdout, stderr: stderr, code: code}
	close(ex.done)
	return ex
}

// autoClose ends the stdin of a command that has had none written when its output is read or
// waited for (see router).
func (ex *execution) autoClose() {
	ex.inMu.Lock()
	defer ex.inMu.Unlock()
	if ex.stdin != nil && !ex.inClosed && ex.written == 0 {
		ex.stdin.Close()
		ex.inClosed = true
	}
}

// wait waits until ex is over or ctx ends.
func (ex *execution) wait(ctx context.Context) error {
	select {
	case <-ex.done:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// token is an unsigned JWT whose exp is an hour away, as the SDK's token checks want.
func token() string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none"}`)) + "." + enc(fmt.Appendf(nil, `{"exp":%d}`, time.Now().Add(time.Hour).Unix())) + ".x"
}

// TaskGetCommandRouterAccess points the SDK's exec client at this same server: an https URL,
// which the SDK dials without TLS because the server URL is a loopback one (as it does for a
// local Modal).
func (s *Server) TaskGetCommandRouterAccess(_ context.Context, req *pb.TaskGetCommandRouterAccessRequest) (*pb.TaskGetCommandRouterAccessResponse, error) {
	s.count("TaskGetCommandRouterAccess")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.byTask(req.GetTaskId()); err != nil {
		return nil, err
	}
	return pb.TaskGetCommandRouterAccessResponse_builder{Jwt: token(), Url: "https://" + s.addr}.Build(), nil
}

// byTask returns the sandbox of task id ("ta-" + sandbox id); the caller holds s.mu.
func (s *Server) byTask(task string) (*sandbox, error) {
	id, ok := strings.CutPrefix(task, "ta-")
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Task %s not found", task)
	}
	return s.lookup(id)
}

// router implements the exec half of modal.task_command_router.TaskCommandRouter (TaskExecStart,
// TaskExecStdinWrite, TaskExecStdioRead, TaskExecWait).
//
// In a sandbox backed by a VM (Options.VM), the command runs for real: its argv, quoted, under
// /bin/sh -c in the VM (with the request's workdir and env), as root, bounded by the request's
// timeout and by the sandbox's end (exit code 137 then). Stdin written with TaskExecStdinWrite
// (at its offset; a repeated range is skipped) is fed to it until the EOF write. Unlike Modal,
// the emulator learns that a command ended only once its stdin ended too (internal/emuvm
// returns then), so a command that has had no stdin written gets EOF on it when the client first
// reads its output or waits for it; clients that write stdin close it (the SDK's
// ContainerProcess.Stdin.Close). Its stdout and stderr are served once it has ended (emuvm
// returns them whole), in chunks of at most 1 MiB, from the requested offset; TaskExecWait
// waits for its exit code. TaskExecStdinWriteStream (used by the SDK's file API) is not
// emulated.
//
// In any other sandbox the emulator answers one command itself: a lookup of I6PNHost (any argv
// whose last word is I6PNHost, such as getent ahosts i6pn.modal.local), which prints the
// sandbox's private address in getent's format and exits 0, or exits 2 (getent's "not found")
// for a sandbox without i6pn. Every other command exits 127 with a message on stderr.
type router struct {
	pb.UnimplementedTaskCommandRouterServer
	s *Server
}

// TaskExecStart runs an exec to completion.
func (r *router) TaskExecStart(_ context.Context, req *pb.TaskExecStartRequest) (*pb.TaskExecStartResponse, error) {
	s := r.s
	s.count("TaskExecStart")
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, err := s.byTask(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if sb.done() {
		return nil, status.Errorf(codes.FailedPrecondition, "Sandbox has already finished with status %s", sb.status)
	}
	if s.closed {
		return nil, status.Error(codes.Unavailable, "the emulator is closing")
	}
	args := req.GetCommandArgs()
	var ex *execution
	switch {
	case sb.vm != nil:
		ex = s.runInVM(sb, req)
	case len(args) > 0 && args[len(args)-1] == I6PNHost && sb.addr != "":
		ex = finished(fmt.Appendf(nil, "%-15s STREAM %s\n%-15s DGRAM\n%-15s RAW\n", sb.addr, I6PNHost, sb.addr, sb.addr), nil, 0)
	case len(args) > 0 && args[len(args)-1] == I6PNHost:
		ex = finished(nil, nil, 2)
	default:
		ex = finished(nil, fmt.Appendf(nil, "modalemu: exec %q: the emulator runs no commands but a lookup of %s\n", args, I6PNHost), 127)
	}
	if sb.execs == nil {
		sb.execs = map[string]*execution{}
	}
	sb.execs[req.GetExecId()] = ex
	return pb.TaskExecStartResponse_builder{}.Build(), nil
}

func (r *router) exec(task, id string) (*execution, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	sb, err := r.s.byTask(task)
	if err != nil {
		return nil, err
	}
	ex := sb.execs[id]
	if ex == nil {
		return nil, status.Errorf(codes.NotFound, "exec %s not found", id)
	}
	return ex, nil
}

// TaskExecStdioRead streams an exec's stdout or stderr from the requested offset, then ends.
func (r *router) TaskExecStdioRead(req *pb.TaskExecStdioReadRequest, stream grpc.ServerStreamingServer[pb.TaskExecStdioReadResponse]) error {
	r.s.count("TaskExecStdioRead")
	ex, err := r.exec(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return err
	}
	ex.autoClose()
	if err := ex.wait(stream.Context()); err != nil {
		return err
	}
	data := ex.stdout
	if req.GetFileDescriptor() == pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR {
		data = ex.stderr
	}
	for off := req.GetOffset(); off < uint64(len(data)); {
		end := min(off+stdioChunk, uint64(len(data)))
		if err := stream.Send(pb.TaskExecStdioReadResponse_builder{Data: data[off:end]}.Build()); err != nil {
			return err
		}
		off = end
	}
	return nil
}

// stdioChunk bounds the data of one TaskExecStdioReadResponse.
const stdioChunk = 1 << 20

// TaskExecStdinWrite feeds a running command's stdin (see router).
func (r *router) TaskExecStdinWrite(ctx context.Context, req *pb.TaskExecStdinWriteRequest) (*pb.TaskExecStdinWriteResponse, error) {
	r.s.count("TaskExecStdinWrite")
	ex, err := r.exec(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	ex.inMu.Lock()
	defer ex.inMu.Unlock()
	data, off := req.GetData(), req.GetOffset()
	switch {
	case ex.stdin == nil:
		return pb.TaskExecStdinWriteResponse_builder{}.Build(), nil // an answered exec reads none
	case off > ex.written:
		return nil, status.Errorf(codes.InvalidArgument, "stdin offset %d is past the %d bytes written", off, ex.written)
	case ex.written-off >= uint64(len(data)):
		data = nil // written already
	default:
		data = data[ex.written-off:]
	}
	if len(data) > 0 && ex.inClosed {
		return nil, status.Errorf(codes.FailedPrecondition, "stdin of exec %s is closed", req.GetExecId())
	}
	if len(data) > 0 {
		n, err := ex.stdin.Write(data)
		ex.written += uint64(n)
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "stdin of exec %s: the command has ended: %v", req.GetExecId(), err)
		}
	}
	if req.GetEof() && !ex.inClosed {
		ex.stdin.Close()
		ex.inClosed = true
	}
	return pb.TaskExecStdinWriteResponse_builder{}.Build(), nil
}

// TaskExecWait returns an exec's exit code.
func (r *router) TaskExecWait(ctx context.Context, req *pb.TaskExecWaitRequest) (*pb.TaskExecWaitResponse, error) {
	r.s.count("TaskExecWait")
	ex, err := r.exec(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	ex.autoClose()
	if err := ex.wait(ctx); err != nil {
		return nil, err
	}
	return pb.TaskExecWaitResponse_builder{Code: &ex.code}.Build(), nil
}

// runInVM starts req's command in sb's VM (see router); the caller holds s.mu.
func (s *Server) runInVM(sb *sandbox, req *pb.TaskExecStartRequest) *execution {
	pr, pw := io.Pipe()
	ex := &execution{done: make(chan struct{}), stdin: pw}
	ctx, cancel := context.WithCancel(sb.runCtx)
	if t := req.GetTimeoutSecs(); t > 0 {
		ctx, cancel = context.WithTimeout(sb.runCtx, time.Duration(t)*time.Second)
	}
	script := "exec " + quote(req.GetCommandArgs())
	if env := req.GetEnv(); len(env) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(env)) {
			kv = append(kv, k+"="+env[k])
		}
		script = "exec env " + quote(kv) + " " + quote(req.GetCommandArgs())
	}
	if wd := req.GetWorkdir(); wd != "" {
		script = "cd " + quote([]string{wd}) + " || exit 1; " + script
	}
	vm := sb.vm
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		defer cancel()
		// emuvm's Run returns only once stdin ends: end it when the command is cut short.
		stop := context.AfterFunc(ctx, func() { pr.CloseWithError(ctx.Err()) })
		defer stop()
		res, err := vm.Run(ctx, script, pr)
		pr.CloseWithError(errEnded)
		code := int32(res.ExitCode)
		if err != nil {
			code = 137
			res.Stderr = append(res.Stderr, fmt.Sprintf("modalemu: exec ended: %v\n", err)...)
		}
		ex.stdout, ex.stderr, ex.code = res.Stdout, res.Stderr, code
		close(ex.done)
	}()
	return ex
}

// errEnded is what a write to the stdin of a command that has ended meets.
var errEnded = errors.New("the command has ended")

// quote quotes args for /bin/sh.
func quote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
