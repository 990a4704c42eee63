package daemon

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sluice-dev/sluice/agent/objectives"
	"github.com/sluice-dev/sluice/internal/hoststate"
)

// leadsFileName is the latency objectives' lead directions (agent.LeadStore)
// in the state directory.
const leadsFileName = "objective-leads.json"

// leadsFile keeps the agent's objective leads in the state directory. One
// agent per state directory (the unit's StateDirectory=; tests give each
// world its own).
type leadsFile struct{ path string }

func newLeadsFile() leadsFile { return leadsFile{path: filepath.Join(hoststate.Dir(), leadsFileName)} }

// LoadLeads reads the file; none is no leads (a first start).
func (f leadsFile) LoadLeads() ([]objectives.Lead, error) {
	file, err := os.Open(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer file.Close()
	data, err := io.ReadAll(io.LimitReader(file, objectives.MaxLeadsFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.path, err)
	}
	leads, err := objectives.DecodeLeads(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.path, err)
	}
	return leads, nil
}

// SaveLeads replaces the file (atomically: a crash leaves the old leads or
// the new, never a part).
func (f leadsFile) SaveLeads(leads []objectives.Lead) error {
	if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
		return err
	}
	return hoststate.WriteFile(f.path, objectives.EncodeLeads(leads))
}
