package harness

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// AlterClientQuota sets one quota key (producer_byte_rate,
// consumer_byte_rate…) of an entity in the cluster's quota store, as
// kafka-configs.sh --alter --add-config does, through the admin API of
// seeds reached with dial (a namespace's dialer), logging in with opts:
// the one quota writer the scenarios share.
func AlterClientQuota(dial func(host string) (net.Conn, error), seeds []string, e kadm.ClientQuotaEntity, key string, rate float64, opts ...kgo.Opt) error {
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(seeds...), kgo.ClientID("e2e-admin"),
		kgo.Dialer(func(_ context.Context, _, host string) (net.Conn, error) { return dial(host) }))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := kadm.NewClient(cl).AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{
		Entity: e,
		Ops:    []kadm.AlterClientQuotaOp{{Key: key, Value: rate}},
	}})
	if err == nil && len(res) == 1 {
		err = res[0].Err
	}
	if err != nil {
		return fmt.Errorf("alter %s of %v: %w", key, e, err)
	}
	return nil
}
