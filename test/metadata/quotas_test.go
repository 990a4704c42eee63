package metadata_test

import (
	"context"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/metadata"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestImportClusterQuotas: quotas altered through the admin API (what
// kafka-configs.sh --alter does) are read back as limits of clients, users
// and <user, client-id>s; a failed read keeps the last good set.
func TestImportClusterQuotas(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	client := metadataClient(t, cluster, kgo.RetryTimeout(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := func(s string) *string { return &s }
	alter := []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: name("orders")}},
			Ops: []kadm.AlterClientQuotaOp{{Key: "consumer_byte_rate", Value: 1e6}, {Key: "request_percentage", Value: 50}}},
		{Entity: kadm.ClientQuotaEntity{{Type: "client-id"}}, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 2e6}}},
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: name("alice")}}, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 3e6}}},
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: name("alice")}, {Type: "client-id", Name: name("orders")}},
			Ops: []kadm.AlterClientQuotaOp{{Key: "consumer_byte_rate", Value: 4e6}}},
	}
	if _, err := kadm.NewClient(client).AlterClientQuotas(ctx, alter); err != nil {
		t.Fatal(err)
	}
	quotas := metadata.NewClusterQuotas(client, time.Hour, 100, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := quotas.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	got, stats := quotas.Latest()
	orders := got.Clients["orders"]
	if len(got.Clients) != 1 || orders.ConsumerByteRate == nil || *orders.ConsumerByteRate != 1e6 || orders.ProducerByteRate != nil {
		t.Errorf("clients %+v, want orders' consumer_byte_rate 1e6 only", got.Clients)
	}
	if d := got.ClientDefault; d.ProducerByteRate == nil || *d.ProducerByteRate != 2e6 || d.ConsumerByteRate != nil {
		t.Errorf("client default %+v, want producer_byte_rate 2e6", d)
	}
	alice := got.Users["alice"]
	if len(got.Users) != 1 || alice.ProducerByteRate == nil || *alice.ProducerByteRate != 3e6 ||
		alice.Clients["orders"].ConsumerByteRate == nil || *alice.Clients["orders"].ConsumerByteRate != 4e6 {
		t.Errorf("users %+v, want alice's producer_byte_rate 3e6 and <alice, orders>' consumer_byte_rate 4e6", got.Users)
	}
	if stats.Generation != 1 || stats.Applied != 4 || stats.Skipped != 0 || stats.Failures != 0 {
		t.Errorf("stats %+v, want generation 1, 4 applied, none skipped", stats)
	}

	cluster.Close()
	if err := quotas.Refresh(ctx); err == nil {
		t.Fatal("a read from a closed cluster succeeded")
	}
	again, stats := quotas.Latest()
	if stats.Failures != 1 || stats.Generation != 1 || len(again.Clients) != 1 || again.ClientDefault != got.ClientDefault {
		t.Errorf("after a failed read: %+v %+v, want the last good set and one failure", again, stats)
	}
}

// Values that are not a positive finite rate are skipped, and the bound
// keeps the first clients by name whatever order the broker answers in.
func TestClientQuotasOfRefusesBadValues(t *testing.T) {
	name := func(s string) *string { return &s }
	entry := func(client string, key string, v float64) kadm.DescribedClientQuota {
		return kadm.DescribedClientQuota{Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: name(client)}},
			Values: kadm.ClientQuotaValues{{Key: key, Value: v}}}
	}
	described := kadm.DescribedClientQuotas{
		entry("nan", "consumer_byte_rate", math.NaN()), entry("inf", "producer_byte_rate", math.Inf(1)),
		entry("zero", "consumer_byte_rate", 0), entry("negative", "producer_byte_rate", -5),
		entry("cpu-only", "request_percentage", 10),
		entry("c", "consumer_byte_rate", 3), entry("a", "consumer_byte_rate", 1), entry("b", "consumer_byte_rate", 2),
		{Entity: kadm.ClientQuotaEntity{{Type: "ip", Name: name("10.0.0.1")}}, Values: kadm.ClientQuotaValues{{Key: "connection_creation_rate", Value: 5}}},
	}
	got, skipped := metadata.ClientQuotasOf(described, 2)
	if len(got.Clients) != 2 || got.Clients["a"].ConsumerByteRate == nil || got.Clients["b"].ConsumerByteRate == nil {
		t.Errorf("clients %v, want a and b", got.Clients)
	}
	if skipped != 7 {
		t.Errorf("skipped %d, want 7 (four bad values, one without a rate, one beyond the bound, one ip)", skipped)
	}
}

// Kafka's "no quota" (Long.MAX_VALUE) and any rate beyond the largest the
// configuration takes are read as that largest rate, never a value that
// would wrap a kernel field downstream.
func TestClientQuotasOfHoldsHugeRatesToTheMaximum(t *testing.T) {
	name := func(s string) *string { return &s }
	got, skipped := metadata.ClientQuotasOf(kadm.DescribedClientQuotas{{Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: name("big")}},
		Values: kadm.ClientQuotaValues{{Key: "producer_byte_rate", Value: float64(math.MaxInt64)}, {Key: "consumer_byte_rate", Value: 1e300}}}}, 10)
	q := got.Clients["big"]
	if skipped != 0 || q.ProducerByteRate == nil || *q.ProducerByteRate != config.MaxRate || q.ConsumerByteRate == nil || *q.ConsumerByteRate != config.MaxRate {
		t.Errorf("got %+v (skipped %d), want both rates at config.MaxRate", q, skipped)
	}
}

// User entities and their defaults are read as the file's entities.users
// are written: <default> for Kafka's --entity-default; a name spelled
// <default> and ip quotas are skipped.
func TestClientQuotasOfUsers(t *testing.T) {
	name := func(s string) *string { return &s }
	rate := kadm.ClientQuotaValues{{Key: "consumer_byte_rate", Value: 7}}
	described := kadm.DescribedClientQuotas{
		{Entity: kadm.ClientQuotaEntity{{Type: "user"}}, Values: rate},
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: name("bob")}, {Type: "client-id"}}, Values: rate},
		{Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: name("etl")}, {Type: "user"}}, Values: rate},
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: name("<default>")}}, Values: rate},
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: name("bob")}, {Type: "ip", Name: name("10.0.0.1")}}, Values: rate},
	}
	got, skipped := metadata.ClientQuotasOf(described, 100)
	if skipped != 2 {
		t.Errorf("skipped %d, want 2 (a user spelled <default>, an ip component)", skipped)
	}
	if d := got.Users["<default>"]; d.ConsumerByteRate == nil || d.Clients["etl"].ConsumerByteRate == nil {
		t.Errorf("users <default> %+v, want its own rate and <default>'s etl", d)
	}
	if b := got.Users["bob"]; b.Quota != (config.Quota{}) || b.Clients["<default>"].ConsumerByteRate == nil {
		t.Errorf("bob %+v, want only his clients <default>", b)
	}
}
