// Package termtools owns the tools an agent gets over a Terminal (a shell in the container it
// works in): run_command, read_file and write_file, with their descriptions, input schemas,
// argument decoding and result text. The built-in model agent offers them to its model;
// Serve offers them to any MCP-speaking agent (an A2A agent) as an MCP server.
package termtools

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentenv/agentenv/agent"
)

// The tools agentenv offers over a Terminal.
const (
	ToolRunCommand = "run_command"
	ToolReadFile   = "read_file"
	ToolWriteFile  = "write_file"
)

// DefaultCommandTimeout is a run_command's wall time when the caller gives none; the call's
// context deadline caps it.
const DefaultCommandTimeout = 120 * time.Second

// MaxStreamText bounds what a caller is told of each stream of one command: the tail is kept.
const MaxStreamText = 16 << 10

// MaxFileText bounds what a caller is told of a file read_file reads: the head is kept.
const MaxFileText = 64 << 10

// Tool is one tool over a Terminal.
type Tool struct {
	Name        string
	Description string
	Schema      map[string]any // the input JSON Schema, an object schema
	// Call makes one call over t with the decoded arguments and returns the text the caller
	// is told; isError marks a call that ran but failed (a command stopped by its timeout),
	// err one that could not run (bad arguments, the terminal's error).
	Call func(ctx context.Context, t agent.Terminal, args map[string]any) (text string, isError bool, err error)
}

// Tools returns the three tools, in the order they are offered.
func Tools() []Tool {
	str := map[string]any{"type": "string"}
	obj := func(props map[string]any, required ...string) map[string]any {
		return map[string]any{"type": "object", "properties": props, "required": required}
	}
	return []Tool{
		{Name: ToolRunCommand,
			Description: "Run a shell command (bash -c, else sh -c) in the container you work in and get its exit code, stdout and stderr (each cut to its last 16 KiB). The command runs at most timeout_sec seconds (default 120), then it is stopped.",
			Schema:      obj(map[string]any{"command": str, "timeout_sec": map[string]any{"type": "number", "description": "wall time of the command in seconds; default 120"}}, "command"),
			Call:        runCommand},
		{Name: ToolReadFile,
			Description: "Read a text file in the container you work in (its first 64 KiB).",
			Schema:      obj(map[string]any{"path": str}, "path"),
			Call:        readFile},
		{Name: ToolWriteFile,
			Description: "Write a file in the container you work in, creating its parent folders; an existing file is replaced.",
			Schema:      obj(map[string]any{"path": str, "content": str}, "path", "content"),
			Call:        writeFile},
	}
}

// runCommand is run_command over t.
func runCommand(ctx context.Context, t agent.Terminal, args map[string]any) (string, bool, error) {
	command, err := stringArg(args, "command")
	if err != nil {
		return "", false, err
	}
	timeout := DefaultCommandTimeout
	if v, ok := args["timeout_sec"]; ok && v != nil {
		sec, ok := v.(float64)
		if !ok || sec <= 0 {
			return "", false, fmt.Errorf("timeout_sec: want a positive number, got %v", v)
		}
		timeout = time.Duration(sec * float64(time.Second))
	}
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return "", false, errors.New("no wall time left")
	}
	res, err := t.Run(ctx, command, timeout)
	if err != nil {
		return "", false, err
	}
	var b strings.Builder
	if res.TimedOut {
		fmt.Fprintf(&b, "timed out after %s: the command was stopped\n", timeout.Round(time.Millisecond))
	}
	b.WriteString("exit code: " + strconv.Itoa(res.ExitCode) + "\n")
	b.WriteString("stdout:\n" + tailText(res.Stdout, MaxStreamText))
	b.WriteString("\nstderr:\n" + tailText(res.Stderr, MaxStreamText))
	return b.String(), res.TimedOut, nil
}

// readFile is read_file over t.
func readFile(ctx context.Context, t agent.Terminal, args map[string]any) (string, bool, error) {
	path, err := stringArg(args, "path")
	if err != nil {
		return "", false, err
	}
	data, err := t.ReadFile(ctx, path)
	if err != nil {
		return "", false, err
	}
	return head(string(data), MaxFileText), false, nil
}

// writeFile is write_file over t.
func writeFile(ctx context.Context, t agent.Terminal, args map[string]any) (string, bool, error) {
	path, err := stringArg(args, "path")
	if err != nil {
		return "", false, err
	}
	content, ok := args["content"].(string)
	if !ok {
		return "", false, errors.New("content: want a string")
	}
	if err := t.WriteFile(ctx, path, []byte(content)); err != nil {
		return "", false, err
	}
	return fmt.Sprintf("wrote %d bytes to %s", len(content), path), false, nil
}

// stringArg is args[key] as a non-empty string.
func stringArg(args map[string]any, key string) (string, error) {
	s, ok := args[key].(string)
	if !ok || s == "" {
		return "", fmt.Errorf("%s: want a non-empty string", key)
	}
	return s, nil
}

// tailText is the last n bytes of s (whole characters), after a note of how much was cut.
func tailText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return fmt.Sprintf("[%d bytes cut: the last %d follow]\n", i, len(s)-i) + s[i:]
}

// head is the first n bytes of s (whole characters), then a note of how much was left out.
func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + fmt.Sprintf("\n[%d more bytes not shown: read parts with run_command (sed -n, tail -c)]", len(s)-i)
}
