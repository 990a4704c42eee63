package maps

import "fmt"

// EachIdentity calls fn with every connection that has a saved identity,
// so that the agent can reclaim those whose end it never saw.
func (d *Datapath) EachIdentity(fn func(ConnKey)) error {
	var k sluiceConnKey
	var v sluiceConnIdentity
	it := d.objs.Identities.Iterate()
	for it.Next(&k, &v) {
		fn(fromRaw(k))
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list identities: %w", err)
	}
	return nil
}
