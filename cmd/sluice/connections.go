package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/agent/status"
)

// newConnectionsCmd: `sluice connections`, the data path's governed
// connections as the running agent sees them, one per line: the answer to
// "why is my client unknown?" without a bpftool session.
func newConnectionsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:         "connections [--entity KIND:NAME|NAME] [--peer IP] [-o text|json] [--socket PATH]",
		Short:       "list the governed connections and the entity, rule and request that bound each",
		Args:        noArgs,
		Annotations: annotations(nil, "sluice connections", "sluice connections --entity unknown", "sluice connections --peer 10.1.2.3 -o json"),
	}
	socket := addSocketFlag(c)
	entityFilter := c.Flags().String("entity", "", "only connections held by this `entity` in either direction (kind:name, or a name)")
	peerFilter := c.Flags().String("peer", "", "only connections from this client `IP` address")
	output := addOutputFlag(c)
	c.RegisterFlagCompletionFunc("entity", completeEntities(false))
	c.RunE = func(c *cobra.Command, _ []string) error {
		return runConnections(*socket, *entityFilter, *peerFilter, output.json(), c.OutOrStdout())
	}
	return c
}

// runConnections lists the connections the agent at socket holds, those
// of entityFilter and from peerFilter when given.
func runConnections(socket, entityFilter, peerFilter string, asJSON bool, stdout io.Writer) error {
	var peer netip.Addr
	if peerFilter != "" {
		var err error
		if peer, err = netip.ParseAddr(peerFilter); err != nil {
			return usageError{fmt.Errorf("--peer %q: give a client's IP address", peerFilter)}
		}
	}
	views, err := status.QueryConnections(socket, peer)
	if err != nil {
		return err
	}
	match := []status.ConnectionView{}
	for _, v := range views {
		if entityFilter == "" || holds(v.Produce, entityFilter) || holds(v.Fetch, entityFilter) {
			match = append(match, v)
		}
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(match)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tLOCAL\tLISTENER\tPRODUCE\tFETCH\tBOUND\tSINCE\tRULE")
	for _, v := range match {
		since := "-"
		if v.Since != nil {
			since = v.Since.Format(time.RFC3339)
		}
		bound := v.Reason
		if v.BoundBy != "" {
			bound += " (" + v.BoundBy + ")"
		}
		if v.Closing {
			bound += ", closing"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Peer, v.Local, v.Listener, v.Produce, v.Fetch, nameOr(bound), since, v.Rule)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d connection(s)\n", len(match))
	return nil
}

// holds says whether an entity ("kind:name") is the one a filter names:
// the same kind:name, or, for a filter without a kind, the same name.
func holds(entity, filter string) bool {
	if entity == filter {
		return true
	}
	if strings.Contains(filter, ":") {
		return false
	}
	_, name, ok := strings.Cut(entity, ":")
	return ok && name == filter
}
