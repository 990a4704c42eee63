package main

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/status"
)

// outputFormat is the -o, --output flag: text (for people) or json (for
// scripts). Any other value is refused as the flags are parsed, so a
// command that acts (unload, bugreport) has done nothing when it is.
type outputFormat struct {
	value   string
	formats []string
}

func (o *outputFormat) String() string { return o.value }
func (o *outputFormat) Type() string   { return "format" }
func (o *outputFormat) Set(v string) error {
	if !slices.Contains(o.formats, v) {
		return fmt.Errorf("use %s", strings.Join(o.formats, " or "))
	}
	o.value = v
	return nil
}

func (o *outputFormat) json() bool { return o.value == "json" }

// addOutputFlag defines -o, --output (text or json, default text) on c and
// completes its values.
func addOutputFlag(c *cobra.Command) *outputFormat {
	o := &outputFormat{value: "text", formats: []string{"text", "json"}}
	c.Flags().VarP(o, "output", "o", "output format: text or json")
	c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(o.formats, cobra.ShellCompDirectiveNoFileComp))
	return o
}

// addSocketFlag defines --socket, the running agent's status socket.
func addSocketFlag(c *cobra.Command) *string {
	s := c.Flags().String("socket", config.Default().Socket, "`path` of the agent's status socket")
	c.MarkFlagFilename("socket", "sock")
	return s
}

// socketOf is the status socket c's --socket names, for completion (the
// flags are parsed by then).
func socketOf(c *cobra.Command) string {
	if s, err := c.Flags().GetString("socket"); err == nil && s != "" {
		return s
	}
	return config.Default().Socket
}

// completeEntities completes entity names from the running agent (kind:name
// and the bare name), and with connections also the clients' addresses it
// holds connections from; it completes nothing when no agent answers.
func completeEntities(connections bool) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		socket := socketOf(c)
		var out []cobra.Completion
		seen := map[string]bool{}
		add := func(word, desc string) {
			if word != "" && !seen[word] {
				seen[word] = true
				out = append(out, cobra.CompletionWithDesc(word, desc))
			}
		}
		if s, err := status.Query(socket); err == nil {
			for _, d := range s.Directions {
				for _, e := range d.Entities {
					if e.Name != "" {
						add(e.Kind+":"+e.Name, e.State)
					}
					add(e.Name, e.Kind)
				}
			}
		}
		if connections {
			if views, err := status.QueryConnections(socket, netip.Addr{}); err == nil {
				for _, v := range views {
					add(v.Peer, "connection to "+v.Local)
				}
			}
		}
		slices.SortFunc(out, strings.Compare)
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
