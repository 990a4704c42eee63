//go:build !faultinject

package daemon

// reloadFaultHook is nil in every real build: no reload step can be made
// to fail from outside. Tests build with -tags faultinject (faultinject.go).
func reloadFaultHook() func(step string) error { return nil }
