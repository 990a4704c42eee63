package daemon

import (
	"errors"
	"fmt"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/shaper"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
)

// ErrRefused marks a start that the configuration or the host's state
// refuses: restarting cannot help until an operator changes something, so
// `sluice run` exits with ExitRefused, which the unit's
// RestartPreventExitStatus= does not restart (no crash loop), after
// detaching whatever this attempt attached.
var ErrRefused = errors.New("refused (not restarted)")

// ExitRefused is `sluice run`'s exit status for ErrRefused (EX_CONFIG).
const ExitRefused = 78

// refusal marks err as a refusal when it is one of the host's or the
// configuration's (a missing interface is marked where it is found, the
// host's others are a *Refusal).
func refusal(err error) error {
	if err == nil || errors.Is(err, ErrRefused) {
		return err
	}
	if r := (*Refusal)(nil); errors.As(err, &r) {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	for _, r := range []error{config.ErrInvalid, maps.ErrIncompatiblePins, maps.ErrPinDirBusy, maps.ErrPinPath,
		shaper.ErrForeignRootQdisc, shaper.ErrForeignDevice, status.ErrSocketTaken} {
		if errors.Is(err, r) {
			return fmt.Errorf("%w: %w", ErrRefused, err)
		}
	}
	return err
}
