package explorer

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"path"
	"time"
)

//go:embed assets
var assets embed.FS

// staticFS holds the style sheet and the script, served as files (the CSP allows no inline
// script or style).
var staticFS = must(fs.Sub(assets, "assets/static"))

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// pages holds one template set per page, each the layout plus the page.
type pages struct {
	sets map[string]*template.Template
}

func newPages() (*pages, error) {
	names, err := fs.Glob(assets, "assets/pages/*.html")
	if err != nil {
		return nil, fmt.Errorf("explorer: pages: %w", err)
	}
	p := &pages{sets: map[string]*template.Template{}}
	for _, n := range names {
		base := path.Base(n)
		if base == "layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "assets/pages/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("explorer: page %s: %w", base, err)
		}
		p.sets[base[:len(base)-len(".html")]] = t
	}
	return p, nil
}

// pageData is what the layout gets: the page's view and what every page shows.
type pageData struct {
	Title string
	Nav   string
	CSRF  string
	Path  string
	V     any
	Err   string
	Code  int
}

// page renders the view into its template, or the error page.
func (x *Explorer) page(name string, fn view) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := pageData{Nav: name, CSRF: x.csrf, Path: r.URL.Path, Code: http.StatusOK}
		v, err := fn(r)
		if err != nil {
			if redirect(w, r, err, "/groups/") {
				return
			}
			d.Code, d.Err, name = statusOf(err), err.Error(), "error"
		}
		d.V = v
		var b bytes.Buffer
		if err := x.pages.sets[name].Execute(&b, d); err != nil {
			x.log.Error("explorer: render", "page", name, "err", err)
			http.Error(w, "render "+name+": "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(d.Code)
		_, _ = w.Write(b.Bytes())
	})
}

var funcs = template.FuncMap{
	"score": func(s *float64) string {
		if s == nil {
			return "–"
		}
		return fmt.Sprintf("%.3g", *s)
	},
	"pct": func(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) },
	"num": func(f float64) string { return fmt.Sprintf("%.3g", f) },
	"secs": func(s float64) string {
		if s <= 0 {
			return "–"
		}
		return seconds(s)
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.Local().Format("2006-01-02 15:04:05")
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		d := time.Since(t)
		suffix := " ago"
		if d < 0 {
			d, suffix = -d, " from now"
		}
		switch {
		case d < time.Minute:
			return fmt.Sprintf("%ds%s", int(d.Seconds()), suffix)
		case d < time.Hour:
			return fmt.Sprintf("%dm%s", int(d.Minutes()), suffix)
		case d < 48*time.Hour:
			return fmt.Sprintf("%dh%s", int(d.Hours()), suffix)
		}
		return fmt.Sprintf("%dd%s", int(d.Hours()/24), suffix)
	},
	// bar geometry for the inline SVG charts: a fraction of a full height or width.
	"scale":    func(frac, full float64) float64 { return math.Round(math.Max(0, frac)*full*10) / 10 },
	"sub":      func(a, b float64) float64 { return math.Round((a-b)*10) / 10 },
	"add":      func(a, b float64) float64 { return math.Round((a+b)*10) / 10 },
	"pos":      func(i int, w float64) float64 { return float64(i) * w },
	"div":      func(a float64, b int) float64 { return a / float64(max(b, 1)) },
	"list":     func(s ...string) []string { return s },
	"addi":     func(a, b int) int { return a + b },
	"sub1":     func(a int) int { return a - 1 },
	"lower":    func(v any) string { return cssClass(fmt.Sprint(v)) },
	"outcomes": outcomes,
	"count":    func(m map[string]int, k string) int { return m[k] },
	"q": func(kv ...string) string {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] != "" {
				v.Set(kv[i], kv[i+1])
			}
		}
		return v.Encode()
	},
}

// cssClass turns an outcome or status into a class name: "scored below 1" -> "scored-below-1".
func cssClass(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return "st-" + string(b)
}
