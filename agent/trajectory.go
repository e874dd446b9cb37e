package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Kinds of trajectory line.
const (
	KindPrompt     = "prompt"      // the prompt given (Text), with the agent kind (Agent)
	KindModel      = "model"       // one model turn or agent message (Text, ToolCalls, Usage)
	KindToolCall   = "tool_call"   // a tool call (Tool, CallID, Arguments)
	KindToolResult = "tool_result" // its result (Text, JSON, IsError)
	KindResponse   = "response"    // the final answer (Text, JSON)
	KindError      = "error"       // what ended the prompt in error (Error)
	KindStop       = "stop"        // why the loop ended (Text: a Stop* value), with the total Usage
)

// Line is one line of an agent's trajectory file (JSON Lines, in the run's folder). Every
// agent kind writes this one shape, so that an export or a viewer reads one format.
type Line struct {
	Seq        int             `json:"seq"`
	Time       time.Time       `json:"time"`
	Kind       string          `json:"kind"` // one of the Kind* values
	Agent      string          `json:"agent,omitempty"`
	Turn       int             `json:"turn,omitempty"`
	Model      string          `json:"model,omitempty"`
	Tool       string          `json:"tool,omitempty"`
	CallID     string          `json:"call_id,omitempty"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Text       string          `json:"text,omitempty"`
	JSON       json.RawMessage `json:"json,omitempty"`
	IsError    bool            `json:"is_error,omitempty"`
	ToolCalls  int             `json:"tool_calls,omitempty"`
	DurationMS int64           `json:"duration_ms,omitempty"` // a model turn's or tool call's wall time
	Usage      *Usage          `json:"usage,omitempty"`
	Error      string          `json:"error,omitempty"`
	// Images are the images a tool result held (a browser's screenshots), saved beside the
	// trajectory file by SaveImage rather than inlined.
	Images []Image `json:"images,omitempty"`
}

// Image is an image saved with a trajectory: its file, relative to the trajectory file's
// folder, and its media type.
type Image struct {
	Path      string `json:"path"`
	MediaType string `json:"media_type"`
}

// Bounds of the images a trajectory keeps: each at most MaxImageBytes, at most MaxImages.
const (
	MaxImageBytes = 8 << 20
	MaxImages     = 1000
)

// imageExts are the image types a trajectory keeps, with their file extensions.
var imageExts = map[string]string{"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}

// ImagesDir is the folder beside a trajectory file at path where its images are saved.
func ImagesDir(path string) string { return strings.TrimSuffix(path, filepath.Ext(path)) + ".images" }

// Trajectory writes Lines to a file as they happen. Safe for concurrent use.
type Trajectory struct {
	path   string
	mu     sync.Mutex
	f      *os.File
	enc    *json.Encoder
	seq    int
	images int // saved so far
	werr   error
}

// Create makes (or truncates) the trajectory file at path.
func Create(path string) (*Trajectory, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("trajectory: %w", err)
	}
	return &Trajectory{path: path, f: f, enc: json.NewEncoder(f)}, nil
}

// Path is the file's path.
func (t *Trajectory) Path() string { return t.path }

// KeepImages saves each image of imgs (media type and bytes) with SaveImage and returns those
// kept, in order, and why any other was not (nil if all were).
func (t *Trajectory) KeepImages(imgs iter.Seq2[string, []byte]) ([]Image, error) {
	var out []Image
	var errs []error
	for mediaType, data := range imgs {
		im, err := t.SaveImage(mediaType, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, im)
	}
	return out, errors.Join(errs...)
}

// SaveImage saves data, an image of mediaType, in the trajectory's images folder (ImagesDir)
// and returns it as a Line references it. An image of another type than PNG, JPEG, GIF or
// WebP, one over MaxImageBytes, or one past MaxImages is refused with an error saying so.
func (t *Trajectory) SaveImage(mediaType string, data []byte) (Image, error) {
	ext, ok := imageExts[mediaType]
	if !ok {
		return Image{}, fmt.Errorf("trajectory: image type %q not kept (want png, jpeg, gif or webp)", mediaType)
	}
	if len(data) > MaxImageBytes {
		return Image{}, fmt.Errorf("trajectory: image of %d bytes not kept (at most %d)", len(data), MaxImageBytes)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.path == "" || t.f == nil {
		return Image{}, errors.New("trajectory: image not kept: no open trajectory file")
	}
	if t.images >= MaxImages {
		return Image{}, fmt.Errorf("trajectory: image not kept: %d already", MaxImages)
	}
	t.images++
	dir := ImagesDir(t.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Image{}, fmt.Errorf("trajectory: %w", err)
	}
	name := fmt.Sprintf("%04d%s", t.images, ext)
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
		return Image{}, fmt.Errorf("trajectory: %w", err)
	}
	return Image{Path: filepath.Base(dir) + "/" + name, MediaType: mediaType}, nil
}

// Write appends l, numbering and timing it. Arguments that are not valid JSON are kept as a
// JSON string. A write error is kept for Err.
func (t *Trajectory) Write(l Line) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	l.Seq, l.Time = t.seq, time.Now().UTC()
	if len(l.Arguments) > 0 && !json.Valid(l.Arguments) {
		b, _ := json.Marshal(string(l.Arguments))
		l.Arguments = b
	}
	if len(l.JSON) > 0 && !json.Valid(l.JSON) {
		b, _ := json.Marshal(string(l.JSON))
		l.JSON = b
	}
	if t.f == nil {
		return
	}
	if err := t.enc.Encode(l); err != nil && t.werr == nil {
		t.werr = fmt.Errorf("trajectory: %w", err)
	}
}

// Err is the first error writing or closing the file.
func (t *Trajectory) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.werr
}

// Close closes the file; later writes are dropped.
func (t *Trajectory) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.f == nil {
		return t.werr
	}
	if err := t.f.Close(); err != nil && t.werr == nil {
		t.werr = fmt.Errorf("trajectory: %w", err)
	}
	t.f = nil
	return t.werr
}

// Finish writes the end of a prompt's trajectory from what the agent gave back: the response
// line (or, with err, the error line), then the stop line with ans.Stop (StopError if the agent
// set none and err is not nil, StopAnswer if neither) and the total usage. Whoever drives an
// agent calls it once, after Prompt, so every kind of agent ends its trajectory the same way.
// It returns the stop it wrote.
func Finish(tr *Trajectory, ans Answer, err error) string {
	stop := ans.Stop
	if err != nil {
		tr.Write(Line{Kind: KindError, Error: err.Error()})
		if stop == "" {
			stop = StopError
		}
	} else {
		var structured json.RawMessage
		if len(ans.Structured) > 0 {
			structured = ans.Structured
		}
		tr.Write(Line{Kind: KindResponse, Text: ans.Text, JSON: structured})
		if stop == "" {
			stop = StopAnswer
		}
	}
	u := ans.Usage
	tr.Write(Line{Kind: KindStop, Text: stop, Turn: ans.Turns, ToolCalls: ans.ToolCalls, Usage: &u})
	return stop
}
