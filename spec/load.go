package spec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/yamlfile"
)

// Load reads, decodes and validates the env file at path. Relative paths in the file are
// resolved against the file's directory. A read error is returned as is (wrapped); every
// problem in the file is a [*Error], and they are joined with errors.Join.
func Load(path string) (*Env, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load env: %w: %w", err, agentenv.ErrInvalid)
	}
	return Parse(path, data)
}

// Parse decodes and validates data as an env file named name. name is used in errors and as
// the base for relative paths (its directory), and checked files are looked up on disk.
// Decoding is strict: an unknown field is an error.
func Parse(name string, data []byte) (*Env, error) {
	d := newDecoder(name)
	e := &Env{File: name, Dir: filepath.Dir(name), digest: digest(data)}
	root, err := yamlfile.Parse(name, "env file", data)
	if err != nil {
		return nil, err
	}
	d.decodeEnv(root, e)
	e.lines = d.Lines
	e.Defaults()
	errs := append(d.Errs, e.validate(d.Failed)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return e, nil
}

func (d *decoder) decodeEnv(n *yaml.Node, e *Env) {
	if n.Kind != yaml.MappingNode && !yamlfile.IsNull(n) {
		d.Fail(n, "", "want a mapping of env fields, got %s", yamlfile.Describe(n))
		return
	}
	known := []string{"name", "description", "servers", "service_db", "gateway", "egress", "websites", "browser"}
	d.Fields(n, "", known, func(key string, v *yaml.Node, p string) {
		switch key {
		case "name":
			e.Name = d.Str(v, p)
		case "description":
			e.Description = d.Str(v, p)
		case "servers":
			d.List(v, p, func(_ int, v *yaml.Node, p string) {
				var s Server
				d.decodeServer(v, p, &s)
				e.Servers = append(e.Servers, s)
			})
		case "service_db":
			if v = d.Resolve(v, p); v != nil && !yamlfile.IsNull(v) {
				e.ServiceDB = &ServiceDB{}
				d.decodeServiceDB(v, p, e.ServiceDB)
			}
		case "gateway":
			d.decodeGateway(v, p, &e.Gateway)
		case "egress":
			e.Egress = d.Strings(v, p)
		case "websites":
			d.List(v, p, func(_ int, v *yaml.Node, p string) {
				var w Website
				d.decodeWebsite(v, p, &w)
				e.Websites = append(e.Websites, w)
			})
		case "browser":
			d.decodeBrowser(v, p, &e.Browser)
		}
	})
}

func (d *decoder) decodeBrowser(n *yaml.Node, path string, b *Browser) {
	d.Fields(n, path, []string{"enabled", "vision", "screenshots", "vnc", "image", "resources"}, func(key string, v *yaml.Node, p string) {
		switch key {
		case "enabled":
			b.Enabled = d.Boolean(v, p)
		case "vision":
			b.Vision = d.Boolean(v, p)
		case "screenshots":
			b.Screenshots = d.Str(v, p)
		case "vnc":
			b.VNC = d.Boolean(v, p)
		case "image":
			b.Image = d.Str(v, p)
		case "resources":
			d.decodeResources(v, p, &b.Resources)
		}
	})
}

func (d *decoder) decodeServer(n *yaml.Node, path string, s *Server) {
	known := []string{"name", "image", "url", "command", "env", "port", "transport", "path", "database", "ready_timeout", "resources", "expose"}
	d.Fields(n, path, known, func(key string, v *yaml.Node, p string) {
		switch key {
		case "name":
			s.Name = d.Str(v, p)
		case "image":
			s.Image = d.Str(v, p)
		case "url":
			s.URL = d.Str(v, p)
		case "command":
			s.Command = d.Strings(v, p)
		case "env":
			s.Env = d.StringMap(v, p)
		case "port":
			s.Port = d.Integer(v, p)
		case "transport":
			s.Transport = Transport(d.Str(v, p))
		case "path":
			s.Path = d.Str(v, p)
		case "database":
			s.Database = d.Boolean(v, p)
		case "ready_timeout":
			s.ReadyTimeout = d.Duration(v, p)
		case "resources":
			d.decodeResources(v, p, &s.Resources)
		case "expose":
			s.Expose = d.Boolean(v, p)
		}
	})
}

func (d *decoder) decodeWebsite(n *yaml.Node, path string, w *Website) {
	d.Fields(n, path, []string{"name", "backend", "frontend", "database"}, func(key string, v *yaml.Node, p string) {
		switch key {
		case "name":
			w.Name = d.Str(v, p)
		case "backend":
			d.decodeWebApp(v, p, &w.Backend)
		case "frontend":
			if v = d.Resolve(v, p); v != nil && !yamlfile.IsNull(v) {
				w.Frontend = &WebApp{}
				d.decodeWebApp(v, p, w.Frontend)
			}
		case "database":
			w.Database = d.Boolean(v, p)
		}
	})
}

func (d *decoder) decodeWebApp(n *yaml.Node, path string, a *WebApp) {
	known := []string{"image", "command", "env", "port", "ready_path", "ready_timeout", "resources"}
	d.Fields(n, path, known, func(key string, v *yaml.Node, p string) {
		switch key {
		case "image":
			a.Image = d.Str(v, p)
		case "command":
			a.Command = d.Strings(v, p)
		case "env":
			a.Env = d.StringMap(v, p)
		case "port":
			a.Port = d.Integer(v, p)
		case "ready_path":
			a.ReadyPath = d.Str(v, p)
		case "ready_timeout":
			a.ReadyTimeout = d.Duration(v, p)
		case "resources":
			d.decodeResources(v, p, &a.Resources)
		}
	})
}

func (d *decoder) decodeServiceDB(n *yaml.Node, path string, db *ServiceDB) {
	known := []string{"image", "user", "password", "database", "init_sql", "seed", "from_snapshot", "web_ui", "db_mcp", "ready_timeout", "resources"}
	d.Fields(n, path, known, func(key string, v *yaml.Node, p string) {
		switch key {
		case "image":
			db.Image = d.Str(v, p)
		case "user":
			db.User = d.Str(v, p)
		case "password":
			db.Password = d.Str(v, p)
		case "database":
			db.Database = d.Str(v, p)
		case "init_sql":
			db.InitSQL = d.Strings(v, p)
		case "seed":
			db.Seed = d.Strings(v, p)
		case "from_snapshot":
			db.FromSnapshot = d.Str(v, p)
		case "web_ui":
			d.decodeSidecar(v, p, &db.WebUI)
		case "db_mcp":
			d.decodeSidecar(v, p, &db.DBMCP)
		case "ready_timeout":
			db.ReadyTimeout = d.Duration(v, p)
		case "resources":
			d.decodeResources(v, p, &db.Resources)
		}
	})
}

func (d *decoder) decodeSidecar(n *yaml.Node, path string, s *Sidecar) {
	d.Fields(n, path, []string{"enabled", "image", "port", "resources"}, func(key string, v *yaml.Node, p string) {
		switch key {
		case "enabled":
			s.Enabled = d.Boolean(v, p)
		case "image":
			s.Image = d.Str(v, p)
		case "port":
			s.Port = d.Integer(v, p)
		case "resources":
			d.decodeResources(v, p, &s.Resources)
		}
	})
}

func (d *decoder) decodeGateway(n *yaml.Node, path string, g *Gateway) {
	known := []string{"enabled", "image", "port", "tool_names", "mode", "serialize", "roles", "call_timeout", "resources", "max_conns", "max_sessions"}
	d.Fields(n, path, known, func(key string, v *yaml.Node, p string) {
		switch key {
		case "enabled":
			on := d.Boolean(v, p)
			g.Enabled = &on
		case "image":
			g.Image = d.Str(v, p)
		case "port":
			g.Port = d.Integer(v, p)
		case "tool_names":
			g.ToolNames = ToolNames(d.Str(v, p))
		case "mode":
			g.Mode = GatewayMode(d.Str(v, p))
		case "serialize":
			g.Serialize = Serialize(d.Str(v, p))
		case "roles":
			d.Mapping(v, p, func(role string, v *yaml.Node, p string) {
				if g.Roles == nil {
					g.Roles = map[string][]string{}
				}
				g.Roles[role] = d.Strings(v, p)
			})
		case "call_timeout":
			g.CallTimeout = d.Duration(v, p)
		case "resources":
			d.decodeResources(v, p, &g.Resources)
		case "max_conns":
			g.MaxConns = d.Integer(v, p)
		case "max_sessions":
			g.MaxSessions = d.Integer(v, p)
		}
	})
}
