package daemon

// FaultFileEnv names the file whose content (a step of agent.ReloadStepNames)
// makes that step of every reload fail, in builds for fault-injection
// tests only (-tags faultinject); other builds ignore it.
const FaultFileEnv = "SLUICE_FAIL_RELOAD_STEP_FILE"
