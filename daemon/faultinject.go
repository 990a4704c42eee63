//go:build faultinject

package daemon

import (
	"errors"
	"os"
	"strings"
)

// reloadFaultHook reads the fault file before each step, so a test can
// move the fault from step to step without restarting the agent.
func reloadFaultHook() func(step string) error {
	path := os.Getenv(FaultFileEnv)
	if path == "" {
		return nil
	}
	return func(step string) error {
		data, err := os.ReadFile(path)
		if err != nil || strings.TrimSpace(string(data)) != step {
			return nil
		}
		return errors.New("injected fault")
	}
}
