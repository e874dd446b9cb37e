package stdiobridge_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/examples/kv"
)

// childEnv switches the test binary into a stdio MCP server: "kv" (the kv example), "crashy"
// (tools that exit, hang or add a tool), "stubborn" (ignores SIGTERM and the end of stdin) or
// "exit-now" (exits before initialize). pidFileEnv names a file the child writes its pid to.
const (
	childEnv   = "AGENTENV_TEST_STDIO_CHILD"
	pidFileEnv = "AGENTENV_TEST_STDIO_PIDFILE"
)

// childLife bounds how long a test child lives whatever happens, so a broken test leaks nothing
// for long.
const childLife = 2 * time.Minute

func TestMain(m *testing.M) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		os.Exit(m.Run())
	}
	if f := os.Getenv(pidFileEnv); f != "" {
		if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "write pid file:", err)
			os.Exit(2)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), childLife)
	defer cancel()
	os.Exit(runChild(ctx, mode))
}

// runChild runs the stdio server named mode and returns the exit code.
func runChild(ctx context.Context, mode string) int {
	switch mode {
	case "kv":
		if err := kv.Run(ctx, kv.Config{Stdio: true}, nil); err != nil {
			fmt.Fprintln(os.Stderr, "kv:", err)
			return 1
		}
		return 0
	case "exit-now":
		fmt.Fprintln(os.Stderr, "cannot start: no config")
		return 4
	case "crashy", "stubborn":
	default:
		fmt.Fprintln(os.Stderr, "unknown child mode", mode)
		return 2
	}
	if mode == "stubborn" {
		signal.Ignore(syscall.SIGTERM)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: mode, Version: "v0"}, nil)
	type text struct {
		Text string `json:"text"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, _ *mcp.CallToolRequest, in text) (*mcp.CallToolResult, text, error) {
		return nil, in, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "exit"}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, text, error) {
		fmt.Fprintln(os.Stderr, "dying now")
		os.Exit(3)
		return nil, text{}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "hang"}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, text, error) {
		<-ctx.Done()
		return nil, text{}, ctx.Err()
	})
	mcp.AddTool(s, &mcp.Tool{Name: "grow"}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, text, error) {
		mcp.AddTool(s, &mcp.Tool{Name: "extra"}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, text, error) {
			return nil, text{Text: "extra"}, nil
		})
		return nil, text{Text: "grown"}, nil
	})
	err := s.Run(ctx, &mcp.StdioTransport{})
	if mode == "stubborn" {
		<-ctx.Done() // outlive the end of stdin until killed
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, mode+":", err)
		return 1
	}
	return 0
}
