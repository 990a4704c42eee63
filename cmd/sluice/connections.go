package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/status"
)

// runConnections: `sluice connections`, the data path's governed
// connections as the running agent sees them, one per line: the answer to
// "why is my client unknown?" without a bpftool session.
func runConnections(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("connections", stderr)
	socket := fs.String("socket", config.Default().Socket, "the agent's status socket")
	entityFilter := fs.String("entity", "", "only connections held by this entity in either direction (kind:name, or a name)")
	peerFilter := fs.String("peer", "", "only connections from this client IP address")
	output := outputFlag(fs)
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if err := output.check(); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{fmt.Errorf("connections takes no arguments (got %q): filter with --entity and --peer", fs.Args())}
	}
	var peer netip.Addr
	if *peerFilter != "" {
		var err error
		if peer, err = netip.ParseAddr(*peerFilter); err != nil {
			return usageError{fmt.Errorf("--peer %q: give a client's IP address", *peerFilter)}
		}
	}
	views, err := status.QueryConnections(*socket, peer)
	if err != nil {
		return err
	}
	match := []status.ConnectionView{}
	for _, v := range views {
		if *entityFilter == "" || holds(v.Produce, *entityFilter) || holds(v.Fetch, *entityFilter) {
			match = append(match, v)
		}
	}
	if output.json() {
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
