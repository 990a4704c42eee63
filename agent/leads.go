package agent

// The latency objectives' lead directions outlive the process
// (objectives/leads.go): read back at start, kept whenever they change.

// restoreLeads gives the configured objectives the leads kept by the last
// agent. A store that cannot be read costs only the learning: each
// objective starts from its own direction, as on a first start.
func (a *Agent) restoreLeads() {
	if a.deps.Leads == nil {
		return
	}
	leads, err := a.deps.Leads.LoadLeads()
	if err != nil {
		a.log.Warn("latency objectives' lead directions not restored: each starts from its own direction", "err", err)
		return
	}
	if n := a.objectives.RestoreLeads(leads); n > 0 {
		a.log.Info("latency objectives' lead directions restored", "objectives", n)
	}
}

// keepLeads writes the leads when they changed this cycle; a failed write
// is logged once and tried again next cycle.
func (a *Agent) keepLeads() {
	if a.deps.Leads == nil {
		return
	}
	leads, changed := a.objectives.Leads()
	if !changed {
		return
	}
	if err := a.deps.Leads.SaveLeads(leads); err != nil {
		if msg := err.Error(); msg != a.loop.leadsFailure {
			a.loop.leadsFailure = msg
			a.log.Warn("latency objectives' lead directions not kept: a restart would start each from its own direction", "err", err)
		}
		return
	}
	a.loop.leadsFailure = ""
	a.objectives.LeadsSaved(leads)
}
