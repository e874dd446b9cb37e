package eval

import (
	"context"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/atif"
	"github.com/agentenv/agentenv/task"
)

// Export formats.
const (
	FormatChatJSONL = "chat-jsonl"
	FormatCSV       = "csv"
	FormatATIF      = "atif"
)

// Message is one message of a conversation in the OpenAI chat format.
type Message struct {
	Role       string     `json:"role"` // system, user, assistant or tool
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`   // assistant
	ToolCallID string     `json:"tool_call_id,omitempty"` // tool
	// Images are a user message's image parts (data: URLs); with any, content is written as
	// parts: Content as a text part if not empty, then an image_url part for each.
	Images []string `json:"-"`
}

// MarshalJSON writes m with its content as a string, or as parts when it has images.
func (m Message) MarshalJSON() ([]byte, error) {
	type plain Message // without this method
	if len(m.Images) == 0 {
		return json.Marshal(plain(m))
	}
	type imageURL struct {
		URL string `json:"url"`
	}
	type part struct {
		Type     string    `json:"type"`
		Text     string    `json:"text,omitempty"`
		ImageURL *imageURL `json:"image_url,omitempty"`
	}
	var parts []part
	if m.Content != "" {
		parts = append(parts, part{Type: "text", Text: m.Content})
	}
	for _, u := range m.Images {
		parts = append(parts, part{Type: "image_url", ImageURL: &imageURL{URL: u}})
	}
	return json.Marshal(struct {
		plain
		Content []part `json:"content"`
	}{plain(m), parts})
}

// ToolCall is an assistant's call of a function, in the OpenAI chat format.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // function
	Function FunctionCall `json:"function"`
}

// FunctionCall names a function and its JSON-encoded arguments.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Record is one line of a chat-jsonl export: a finished episode's conversation, its score and
// what graded it.
type Record struct {
	Messages  []Message      `json:"messages"`
	Score     *float64       `json:"score"`
	Outcome   task.Outcome   `json:"outcome"`
	Verifiers []VerifierLine `json:"verifiers"`
	Metadata  Metadata       `json:"metadata"`
}

// VerifierLine is one verifier of an exported episode.
type VerifierLine struct {
	Step   string  `json:"step"`
	Type   string  `json:"type"`
	Status string  `json:"status"`
	Score  float64 `json:"score"`
	Error  string  `json:"error,omitempty"`
}

// Metadata says which episode a Record is.
type Metadata struct {
	Group    string            `json:"group"`
	Run      string            `json:"run"`
	Task     string            `json:"task"`
	TaskFile string            `json:"task_file"`
	Instance int               `json:"instance"`
	Attempt  int               `json:"attempt"`
	Seed     map[string]string `json:"seed,omitempty"`
	Model    string            `json:"model,omitempty"`
	Agent    string            `json:"agent,omitempty"`
}

// Redactor hides secrets in exported text: each of Values, and any 48-hex-digit token (a
// gateway's) or bearer credential.
type Redactor struct{ Values []string }

var (
	hexToken = regexp.MustCompile(`\b[0-9a-f]{48}\b`)
	bearer   = regexp.MustCompile(`(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}`)
)

// Redact returns s with every secret replaced by "[redacted]".
func (r Redactor) Redact(s string) string {
	for _, v := range r.Values {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	s = hexToken.ReplaceAllString(s, "[redacted]")
	return bearer.ReplaceAllString(s, "${1}[redacted]")
}

// CheckFormat says whether format is one Export writes, with an error wrapping
// agentenv.ErrInvalid if not: check it before opening where the export goes.
func CheckFormat(format string) error {
	switch format {
	case FormatChatJSONL, FormatCSV, FormatATIF:
		return nil
	}
	return fmt.Errorf("export format %q: want %s, %s or %s: %w", format, FormatChatJSONL, FormatCSV, FormatATIF, agentenv.ErrInvalid)
}

// Export writes the finished episodes of group g (the latest of each slot) to w in format:
// chat-jsonl, one Record per line; csv, one row of scores per episode; or atif, one ATIF
// trajectory per line for each prompt_agent step of each episode (atifLines). It returns how
// many episodes it wrote.
func Export(ctx context.Context, l agentenv.Ledger, g Group, format string, w io.Writer, red Redactor) (int, error) {
	runs, err := Store{Ledger: l}.Episodes(ctx, g)
	if err != nil {
		return 0, err
	}
	latest := Latest(runs)
	keys := make([]SlotKey, 0, len(latest))
	for k := range latest {
		keys = append(keys, k)
	}
	sortSlots(keys)
	switch format {
	case FormatChatJSONL:
		enc := json.NewEncoder(w)
		n := 0
		for _, k := range keys {
			r := latest[k]
			if !Finished(r) || k.Task >= len(g.Tasks) {
				continue
			}
			rec, err := record(g, k, r, red)
			if err != nil {
				return n, fmt.Errorf("export run %s: %w", r.ID, err)
			}
			if err := enc.Encode(rec); err != nil {
				return n, fmt.Errorf("export: %w", err)
			}
			n++
		}
		return n, nil
	case FormatCSV:
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{"group", "task", "instance", "attempt", "run", "outcome", "score", "seed", "error"})
		n := 0
		for _, k := range keys {
			r := latest[k]
			if !Finished(r) || k.Task >= len(g.Tasks) {
				continue
			}
			ep := episodeOf(r)
			sc := ""
			if ep.Score != nil {
				sc = strconv.FormatFloat(*ep.Score, 'g', -1, 64)
			}
			seed, _ := json.Marshal(ep.Seed)
			if ep.Seed == nil {
				seed = nil
			}
			_ = cw.Write([]string{g.ID, g.Tasks[k.Task].Task, strconv.Itoa(k.Instance), strconv.Itoa(k.Attempt), r.ID,
				string(ep.Outcome), sc, red.Redact(string(seed)), red.Redact(ep.Error)})
			n++
		}
		cw.Flush()
		return n, cw.Error()
	case FormatATIF:
		enc := json.NewEncoder(w)
		version := agentenvVersion()
		n := 0
		for _, k := range keys {
			r := latest[k]
			if !Finished(r) || k.Task >= len(g.Tasks) {
				continue
			}
			trs, err := atifLines(g, k, r, red, version)
			if err != nil {
				return n, fmt.Errorf("export run %s: %w", r.ID, err)
			}
			for _, t := range trs {
				if err := enc.Encode(t); err != nil {
					return n, fmt.Errorf("export: %w", err)
				}
			}
			if len(trs) > 0 {
				n++
			}
		}
		return n, nil
	}
	return 0, CheckFormat(format)
}

// record builds the export line of episode r in slot k.
func record(g Group, k SlotKey, r agentenv.Run, red Redactor) (Record, error) {
	ep := episodeOf(r)
	gt := g.Tasks[k.Task]
	rec := Record{Score: ep.Score, Outcome: ep.Outcome, Verifiers: []VerifierLine{},
		Metadata: Metadata{Group: g.ID, Run: r.ID, Task: gt.Task, TaskFile: gt.File, Instance: k.Instance, Attempt: k.Attempt, Seed: ep.Seed}}
	system := systemPrompts(gt.File, ep.Seed)
	for _, s := range r.Steps {
		if s.Score != nil {
			rec.Verifiers = append(rec.Verifiers, VerifierLine{Step: s.ID, Type: s.Type, Status: string(s.Status), Score: *s.Score, Error: red.Redact(s.Error)})
		}
		p := s.Outputs["trajectory"]
		if s.Type != task.TypePromptAgent || p == "" {
			continue
		}
		if sys := system[s.ID]; sys != "" {
			rec.Messages = append(rec.Messages, Message{Role: "system", Content: red.Redact(sys)})
		}
		msgs, model, kind, err := conversation(p, red)
		if err != nil {
			return rec, err
		}
		rec.Messages = append(rec.Messages, msgs...)
		if rec.Metadata.Model == "" {
			rec.Metadata.Model = model
		}
		if rec.Metadata.Agent == "" {
			rec.Metadata.Agent = kind
		}
	}
	if rec.Messages == nil {
		rec.Messages = []Message{}
	}
	return rec, nil
}

// conversation reads a prompt_agent trajectory file (agent.Line per line) as chat messages:
// the prompt as the user's, each model turn as the assistant's with the tool calls it asked
// for, each tool result as a tool message answering its call, and the final response as the
// assistant's unless the last turn said it already. It returns the model's name and the agent
// kind too.
func conversation(path string, red Redactor) (msgs []Message, model, kind string, err error) {
	lines, err := atif.ReadLines(path)
	if err != nil {
		return nil, "", "", err
	}
	var open []string // call ids of the last assistant message still without a result
	lastAssistant := -1
	nextID := 0
	for _, l := range lines {
		switch l.Kind {
		case agent.KindPrompt:
			kind = l.Agent
			msgs = append(msgs, Message{Role: "user", Content: red.Redact(l.Text)})
			lastAssistant, open = -1, nil
		case agent.KindModel:
			if model == "" {
				model = l.Model
			}
			msgs = append(msgs, Message{Role: "assistant", Content: red.Redact(l.Text)})
			lastAssistant, open = len(msgs)-1, nil
		case agent.KindToolCall:
			if lastAssistant < 0 {
				msgs = append(msgs, Message{Role: "assistant"})
				lastAssistant = len(msgs) - 1
			}
			id := l.CallID
			if id == "" {
				nextID++
				id = fmt.Sprintf("call_%d", nextID)
			}
			args := string(l.Arguments)
			if args == "" {
				args = "{}"
			}
			msgs[lastAssistant].ToolCalls = append(msgs[lastAssistant].ToolCalls,
				ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: funcName(l.Tool), Arguments: red.Redact(args)}})
			open = append(open, id)
		case agent.KindToolResult:
			id := l.CallID
			if id == "" && len(open) > 0 {
				id = open[0]
			}
			if i := indexOf(open, id); i >= 0 {
				open = append(open[:i], open[i+1:]...)
			} else {
				continue // a result of no call we know: not a valid chat message
			}
			text := l.Text
			if text == "" && len(l.JSON) > 0 {
				text = string(l.JSON)
			}
			msgs = append(msgs, Message{Role: "tool", ToolCallID: id, Content: red.Redact(text)})
			// A chat tool message holds text only: the images it returned (a browser's
			// screenshots) follow as a user message of image parts, as vision fine-tuning
			// formats take them.
			if urls := imageURLs(path, l.Images); len(urls) > 0 {
				msgs = append(msgs, Message{Role: "user", Images: urls})
			}
		case agent.KindResponse:
			text := red.Redact(l.Text)
			if lastAssistant >= 0 && lastAssistant == len(msgs)-1 && len(msgs[lastAssistant].ToolCalls) == 0 && msgs[lastAssistant].Content == text {
				continue
			}
			msgs = append(msgs, Message{Role: "assistant", Content: text})
			lastAssistant, open = len(msgs)-1, nil
		}
	}
	// A call left without a result (the episode stopped mid-call) gets an empty one, so that
	// every call id pairs.
	for _, id := range open {
		msgs = append(msgs, Message{Role: "tool", ToolCallID: id, Content: ""})
	}
	return msgs, model, kind, nil
}

// imageURLs are the images of a trajectory line, read from beside the trajectory file at path,
// as data: URLs; an image that cannot be read, or is larger than a trajectory keeps, is left
// out.
func imageURLs(path string, imgs []agent.Image) []string {
	var out []string
	for _, im := range imgs {
		if !filepath.IsLocal(filepath.FromSlash(im.Path)) {
			continue // a line names files beside its trajectory only
		}
		data, err := os.ReadFile(filepath.Join(filepath.Dir(path), filepath.FromSlash(im.Path)))
		if err != nil || len(data) > agent.MaxImageBytes {
			continue
		}
		out = append(out, "data:"+im.MediaType+";base64,"+base64.StdEncoding.EncodeToString(data))
	}
	return out
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

var badFuncChar = regexp.MustCompile(`[^a-zA-Z0-9_-]`)

// funcName is a gateway tool name as a chat function name (letters, digits, _ and -, at most
// 64), as the built-in model agent shows it to a model.
func funcName(name string) string {
	fn := badFuncChar.ReplaceAllString(name, "_")
	if fn == "" {
		fn = "tool"
	}
	return fn[:min(len(fn), 64)]
}

// systemPrompts reads the system messages of the prompt_agent steps of the task file at path,
// by step id, with the seed's placeholders filled; none if the file cannot be read (a built-in
// task).
func systemPrompts(path string, seed map[string]string) map[string]string {
	out := map[string]string{}
	data, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	var doc struct {
		Steps []struct {
			ID     string `yaml:"id"`
			Type   string `yaml:"type"`
			System string `yaml:"system"`
		} `yaml:"steps"`
	}
	if yaml.Unmarshal(data, &doc) != nil {
		return out
	}
	for _, s := range doc.Steps {
		if s.Type == task.TypePromptAgent && s.System != "" {
			sys := s.System
			for k, v := range seed {
				sys = strings.ReplaceAll(sys, "<"+k+">", v)
			}
			out[s.ID] = sys
		}
	}
	return out
}
