package process

import "github.com/agentenv/agentenv/internal/setting"

// Settings are the settings of the process provider, under provider.process.
func Settings() []setting.Key {
	return []setting.Key{
		{Name: "provider.process.root", Doc: "work folders of the process provider (default: $XDG_STATE_HOME/agentenv/sandboxes)"},
	}
}
