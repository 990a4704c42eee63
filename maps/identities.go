package maps

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
)

// Identity is what a connection proved once and no later request repeats:
// the SASL mechanism and principal of its login (struct conn_identity).
// Between its handshake and its login only the mechanism is known: User
// is empty.
type Identity struct {
	Mechanism string
	User      string
}

// ErrIdentityTooLong: a mechanism or principal longer than the pinned
// record holds. It is not cut: a cut name could be another user's.
var ErrIdentityTooLong = errors.New("identity longer than the pinned record holds")

// Longest mechanism name and principal an identity record holds
// (IDENTITY_MECHANISM_MAX, IDENTITY_USER_MAX).
const (
	identityMechanismMax = len(sluiceConnIdentity{}.Mechanism)
	identityUserMax      = len(sluiceConnIdentity{}.User)
)

// SaveIdentity records a connection's identity beside its binding, in
// pinned state. The data path drops it when a new connection takes the
// 4-tuple; the agent drops it when the connection closes.
func (d *Datapath) SaveIdentity(c ConnKey, id Identity) error {
	if len(id.Mechanism) > identityMechanismMax || len(id.User) > identityUserMax {
		return fmt.Errorf("save identity of %s: %w (%d-byte principal, at most %d)", c, ErrIdentityTooLong, len(id.User), identityUserMax)
	}
	var v sluiceConnIdentity
	copy(v.Mechanism[:], id.Mechanism)
	v.UserLen = uint8(len(id.User))
	copy(v.User[:], id.User)
	if err := d.objs.Identities.Put(c.raw(), &v); err != nil {
		return fmt.Errorf("save identity of %s: %w", c, err)
	}
	return nil
}

// Identity returns a connection's saved identity, if any.
func (d *Datapath) Identity(c ConnKey) (Identity, bool, error) {
	var v sluiceConnIdentity
	if err := d.objs.Identities.Lookup(c.raw(), &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return Identity{}, false, nil
		}
		return Identity{}, false, fmt.Errorf("read identity of %s: %w", c, err)
	}
	n := min(int(v.UserLen), identityUserMax)
	return Identity{
		Mechanism: strings.TrimRight(string(v.Mechanism[:]), "\x00"),
		User:      string(v.User[:n]),
	}, true, nil
}

// ForgetIdentities drops the identities of connections (closed ones);
// one without an identity is no error.
func (d *Datapath) ForgetIdentities(conns []ConnKey) error {
	var errs []error
	for _, c := range conns {
		if err := d.objs.Identities.Delete(c.raw()); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("forget identity of %s: %w", c, err))
		}
	}
	return errors.Join(errs...)
}

// Identities counts the saved identities (for tests and diagnostics).
func (d *Datapath) Identities() (int, error) {
	var k sluiceConnKey
	var v sluiceConnIdentity
	n := 0
	it := d.objs.Identities.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("count identities: %w", err)
	}
	return n, nil
}
