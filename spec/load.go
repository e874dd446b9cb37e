package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv/internal/yamlfile"
)

// Load reads, decodes and validates the env file at path. Relative paths in the file are
// resolved against the file's directory. A read error is returned as is (wrapped); every
// problem in the file is a [*Error], and they are joined with errors.Join.
func Load(path string) (*Env, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load env: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes and validates data as an env file named name. name is used in errors and as
// the base for relative paths (its directory), and checked files are looked up on disk.
// Decoding is strict: an unknown field is an error.
func Parse(name string, data []byte) (*Env, error) {
	d := newDecoder(name)
	e := &Env{File: name, Dir: filepath.Dir(name), digest: digest(data)}
	root, err := parseYAML(name, data)
	if err != nil {
		return nil, err
	}
	d.decodeEnv(root, e)
	e.lines = d.lines
	e.Defaults()
	errs := append(d.errs, e.validate(d.failed)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return e, nil
}

// yamlLine finds the line in a yaml.v3 error message ("yaml: line 3: mapping values ...").
var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// parseYAML parses data as exactly one YAML document and returns its root node.
func parseYAML(name string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Msg: "empty env file"}
		}
		return nil, syntaxError(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, syntaxError(name, err)
		}
		return nil, &Error{File: name, Line: extra.Line, Msg: "want one YAML document, found another"}
	}
	if len(doc.Content) == 0 {
		return nil, &Error{File: name, Msg: "empty env file"}
	}
	return doc.Content[0], nil
}

func syntaxError(name string, err error) error {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return &Error{File: name, Msg: err.Error()}
	}
	line, _ := strconv.Atoi(m[1])
	return &Error{File: name, Line: line, Msg: m[2]}
}

func (d *decoder) decodeEnv(n *yaml.Node, e *Env) {
	if n.Kind != yaml.MappingNode && !yamlfile.IsNull(n) {
		d.fail(n, "", "want a mapping of env fields, got %s", yamlfile.Describe(n))
		return
	}
	known := []string{"name", "description", "servers", "service_db", "gateway", "websites"}
	d.fields(n, "", known, func(key string, v *yaml.Node, p string) {
		switch key {
		case "name":
			e.Name = d.str(v, p)
		case "description":
			e.Description = d.str(v, p)
		case "servers":
			d.list(v, p, func(_ int, v *yaml.Node, p string) {
				var s Server
				d.decodeServer(v, p, &s)
				e.Servers = append(e.Servers, s)
			})
		case "service_db":
			if v = d.resolve(v, p); v != nil && !yamlfile.IsNull(v) {
				e.ServiceDB = &ServiceDB{}
				d.decodeServiceDB(v, p, e.ServiceDB)
			}
		case "gateway":
			d.decodeGateway(v, p, &e.Gateway)
		case "websites":
			d.list(v, p, func(i int, v *yaml.Node, p string) {
				if i == 0 {
					d.fail(v, p, "websites are not supported yet")
				}
			})
		}
	})
}

func (d *decoder) decodeServer(n *yaml.Node, path string, s *Server) {
	known := []string{"name", "image", "command", "env", "port", "transport", "path", "database", "ready_timeout"}
	d.fields(n, path, known, func(key string, v *yaml.Node, p string) {
		switch key {
		case "name":
			s.Name = d.str(v, p)
		case "image":
			s.Image = d.str(v, p)
		case "command":
			s.Command = d.strings(v, p)
		case "env":
			s.Env = d.stringMap(v, p)
		case "port":
			s.Port = d.integer(v, p)
		case "transport":
			s.Transport = Transport(d.str(v, p))
		case "path":
			s.Path = d.str(v, p)
		case "database":
			s.Database = d.boolean(v, p)
		case "ready_timeout":
			s.ReadyTimeout = d.duration(v, p)
		}
	})
}

func (d *decoder) decodeServiceDB(n *yaml.Node, path string, db *ServiceDB) {
	known := []string{"image", "user", "password", "database", "init_sql", "seed", "web_ui", "db_mcp", "ready_timeout"}
	d.fields(n, path, known, func(key string, v *yaml.Node, p string) {
		switch key {
		case "image":
			db.Image = d.str(v, p)
		case "user":
			db.User = d.str(v, p)
		case "password":
			db.Password = d.str(v, p)
		case "database":
			db.Database = d.str(v, p)
		case "init_sql":
			db.InitSQL = d.strings(v, p)
		case "seed":
			db.Seed = d.strings(v, p)
		case "web_ui":
			d.decodeSidecar(v, p, &db.WebUI)
		case "db_mcp":
			d.decodeSidecar(v, p, &db.DBMCP)
		case "ready_timeout":
			db.ReadyTimeout = d.duration(v, p)
		}
	})
}

func (d *decoder) decodeSidecar(n *yaml.Node, path string, s *Sidecar) {
	d.fields(n, path, []string{"enabled", "image", "port"}, func(key string, v *yaml.Node, p string) {
		switch key {
		case "enabled":
			s.Enabled = d.boolean(v, p)
		case "image":
			s.Image = d.str(v, p)
		case "port":
			s.Port = d.integer(v, p)
		}
	})
}

func (d *decoder) decodeGateway(n *yaml.Node, path string, g *Gateway) {
	known := []string{"image", "port", "tool_names", "mode", "serialize", "roles", "call_timeout"}
	d.fields(n, path, known, func(key string, v *yaml.Node, p string) {
		switch key {
		case "image":
			g.Image = d.str(v, p)
		case "port":
			g.Port = d.integer(v, p)
		case "tool_names":
			g.ToolNames = ToolNames(d.str(v, p))
		case "mode":
			g.Mode = GatewayMode(d.str(v, p))
		case "serialize":
			g.Serialize = Serialize(d.str(v, p))
		case "roles":
			d.mapping(v, p, func(role string, v *yaml.Node, p string) {
				if g.Roles == nil {
					g.Roles = map[string][]string{}
				}
				g.Roles[role] = d.strings(v, p)
			})
		case "call_timeout":
			g.CallTimeout = d.duration(v, p)
		}
	})
}
