package modalemu

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// I6PNHost is the name a Modal container resolves to its own i6pn address
// (https://modal.com/docs/guide/private-networking).
const I6PNHost = "i6pn.modal.local"

// execution is one exec's finished outcome: the emulator runs an exec to completion at start.
type execution struct {
	stdout, stderr []byte
	code           int32
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
// TaskExecStdioRead, TaskExecWait) for the one command the emulator answers: a lookup of
// I6PNHost (any argv whose last word is I6PNHost, such as getent ahosts i6pn.modal.local),
// which prints the sandbox's private address in getent's format and exits 0, or exits 2 (getent's
// "not found") for a sandbox without i6pn. Every other command exits 127 with a message on
// stderr: the emulator runs no commands in sandboxes.
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
	args := req.GetCommandArgs()
	ex := &execution{}
	switch {
	case len(args) > 0 && args[len(args)-1] == I6PNHost && sb.addr != "":
		ex.stdout = fmt.Appendf(nil, "%-15s STREAM %s\n%-15s DGRAM\n%-15s RAW\n", sb.addr, I6PNHost, sb.addr, sb.addr)
	case len(args) > 0 && args[len(args)-1] == I6PNHost:
		ex.code = 2
	default:
		ex.code, ex.stderr = 127, fmt.Appendf(nil, "modalemu: exec %q: the emulator runs no commands but a lookup of %s\n", args, I6PNHost)
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
	data := ex.stdout
	if req.GetFileDescriptor() == pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR {
		data = ex.stderr
	}
	if off := req.GetOffset(); off < uint64(len(data)) {
		return stream.Send(pb.TaskExecStdioReadResponse_builder{Data: data[off:]}.Build())
	}
	return nil
}

// TaskExecWait returns an exec's exit code.
func (r *router) TaskExecWait(_ context.Context, req *pb.TaskExecWaitRequest) (*pb.TaskExecWaitResponse, error) {
	r.s.count("TaskExecWait")
	ex, err := r.exec(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	return pb.TaskExecWaitResponse_builder{Code: &ex.code}.Build(), nil
}
