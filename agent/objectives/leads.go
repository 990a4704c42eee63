package objectives

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/agent/entity"
)

// Which direction an objective's episodes start with is learned (cross.go):
// one whose p99 came back only once the other direction's best-effort
// traffic was held leads with that direction. A restarted agent that forgot
// it would learn it again the hard way: an episode at the floor of the
// wrong direction, GiveUp disjoint windows over the objective, before it
// crosses. So the leads outlive the process (the daemon keeps them in its
// state directory: Deps.Leads); only an objective configured exactly as it
// was (entity, direction, p99) takes its lead back.

// Lead is an objective that leads with the other direction.
type Lead struct {
	Objective entity.Objective
	Lead      entity.Direction
}

// Leads lists the objectives that lead with the other direction, in
// configuration order, and whether the list differs from what LeadsSaved
// (or RestoreLeads) last recorded.
func (t *Tracker) Leads() (leads []Lead, changed bool) {
	for _, o := range t.list {
		if o.lead != o.Direction {
			leads = append(leads, Lead{Objective: o.Objective, Lead: o.lead})
		}
	}
	return leads, !slices.Equal(leads, t.savedLeads)
}

// LeadsSaved records the leads the owner kept (Leads' list).
func (t *Tracker) LeadsSaved(leads []Lead) { t.savedLeads = slices.Clone(leads) }

// RestoreLeads gives each configured objective the lead it had, when it is
// configured as it was; the others start from their own direction. It
// returns how many took theirs back. Call it after Sync, before the first
// cycle.
func (t *Tracker) RestoreLeads(leads []Lead) int {
	restored := 0
	for _, l := range leads {
		for _, o := range t.list {
			if o.Objective != l.Objective || o.lead == l.Lead || o.crossed {
				continue
			}
			o.lead, o.trims = l.Lead, l.Lead
			restored++
		}
	}
	current, _ := t.Leads()
	t.LeadsSaved(current)
	return restored
}

// leadsVersion is the leads file's format.
const leadsVersion = 1

type leadsFile struct {
	Version int          `json:"version"`
	Leads   []leadRecord `json:"leads"`
}

type leadRecord struct {
	Kind      entity.Kind `json:"kind"`
	Name      string      `json:"name"`
	Direction string      `json:"direction"`
	P99       string      `json:"p99"`
	Lead      string      `json:"lead"`
}

// MaxLeadsFileBytes bounds what DecodeLeads is given: a file this large is
// not one sluice wrote (an entry is under 400 bytes, a configuration
// has at most a few hundred objectives).
const MaxLeadsFileBytes = 1 << 20

// EncodeLeads is the leads' file.
func EncodeLeads(leads []Lead) []byte {
	f := leadsFile{Version: leadsVersion, Leads: make([]leadRecord, 0, len(leads))}
	for _, l := range leads {
		f.Leads = append(f.Leads, leadRecord{Kind: l.Objective.Key.Kind, Name: l.Objective.Key.Name,
			Direction: l.Objective.Direction.String(), P99: l.Objective.P99.String(), Lead: l.Lead.String()})
	}
	data, _ := json.MarshalIndent(f, "", "  ") // plain values: cannot fail
	return append(data, '\n')
}

// DecodeLeads reads a leads file; anything it does not recognise is an
// error, and nothing of such a file is used.
func DecodeLeads(data []byte) ([]Lead, error) {
	if len(data) > MaxLeadsFileBytes {
		return nil, fmt.Errorf("%d bytes, more than the %d a leads file can be", len(data), MaxLeadsFileBytes)
	}
	var f leadsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("not a leads file: %w", err)
	}
	if f.Version != leadsVersion {
		return nil, fmt.Errorf("version %d, this sluice reads %d", f.Version, leadsVersion)
	}
	leads := make([]Lead, 0, len(f.Leads))
	for i, r := range f.Leads {
		dir, ok1 := parseDirection(r.Direction)
		lead, ok2 := parseDirection(r.Lead)
		p99, err := time.ParseDuration(r.P99)
		switch {
		case r.Kind < entity.KindClient || r.Kind > entity.KindUnresolved || r.Name == "":
			return nil, fmt.Errorf("leads[%d]: not a configured entity (kind %d, name %q)", i, r.Kind, r.Name)
		case !ok1 || !ok2:
			return nil, fmt.Errorf("leads[%d]: direction %q, lead %q: each must be produce or fetch", i, r.Direction, r.Lead)
		case err != nil || p99 <= 0:
			return nil, fmt.Errorf("leads[%d]: p99 %q is not a positive duration", i, r.P99)
		}
		leads = append(leads, Lead{Objective: entity.Objective{Key: entity.Key{Kind: r.Kind, Name: r.Name}, Direction: dir, P99: p99}, Lead: lead})
	}
	return leads, nil
}

func parseDirection(s string) (entity.Direction, bool) {
	for _, d := range entity.Directions {
		if d.String() == s {
			return d, true
		}
	}
	return 0, false
}
