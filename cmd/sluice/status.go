package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/status"
)

// newStatusCmd: `sluice status [--socket PATH] [--watch] [--wait D] [-o text|json]`.
func newStatusCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "status [-o text|json] [--watch] [--wait DURATION] [--socket PATH]",
		Short: "show the running agent's directions and entities (--watch to refresh)",
		Args:  noArgs,
		Annotations: annotations(nil, "sluice status", "sluice status --watch", "systemctl start sluice && sluice status --wait 30s",
			"sluice status -o json | jq '.directions[] | {direction, overcommit, promised_ratio}'"),
	}
	socket := addSocketFlag(c)
	watch := c.Flags().Bool("watch", false, "refresh every second until interrupted")
	wait := c.Flags().Duration("wait", 0, "wait up to this `duration` for a running agent that has completed a control cycle (after systemctl start, in scripts); exit 1 if none")
	output := addOutputFlag(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		return runStatus(c.Context(), *socket, *watch, *wait, output.json(), c.OutOrStdout())
	}
	return c
}

// runStatus prints the agent's snapshot, every second with watch.
func runStatus(ctx context.Context, socket string, watch bool, wait time.Duration, asJSON bool, stdout io.Writer) error {
	if wait < 0 {
		return usageError{fmt.Errorf("--wait %v: give a duration of zero or more", wait)}
	}
	if wait > 0 {
		if err := waitForAgent(ctx, socket, wait); err != nil {
			return err
		}
	}
	for {
		s, err := status.Query(socket)
		if err != nil {
			return err
		}
		if asJSON {
			// The socket's own schema, one document per line (per refresh).
			if err := json.NewEncoder(stdout).Encode(s); err != nil {
				return err
			}
		} else {
			if watch {
				fmt.Fprint(stdout, "\033[H\033[2J")
			}
			writeStatus(stdout, s)
		}
		if !watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// waitForAgent polls the status socket until the agent answers with a
// completed control cycle, or the time is up (the last error says why).
func waitForAgent(ctx context.Context, socket string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		s, err := status.Query(socket)
		if err == nil && s.Cycle > 0 {
			return nil
		}
		if err == nil {
			err = errors.New("the agent answers but has not completed a control cycle yet")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no ready agent at %s after %v: %w", socket, limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond): // polling the socket, bounded by the deadline
		}
	}
}

func writeStatus(w io.Writer, s *status.Snapshot) {
	agent := "sluice"
	if s.AgentVersion != "" {
		agent = "sluice " + s.AgentVersion
	}
	fmt.Fprintf(w, "%s  cycle %d at %s  mode %s  shaper %s (%s)\n", agent, s.Cycle, s.Time.Format(time.TimeOnly), s.Mode, s.Shaper, s.ShaperReason)
	if s.AgentVersion != "" {
		if differs := versionDiffers(s.AgentVersion); differs != "" {
			fmt.Fprintf(w, "WARNING this agent is sluice %s%s\n", s.AgentVersion, differs)
		}
	}
	if len(s.UnexemptBrokers) > 0 {
		fmt.Fprintf(w, "WARNING replication is governed: brokers outside exempt_peers: %s\n", strings.Join(s.UnexemptBrokers, ", "))
	}
	if r := s.LastReload; r != nil {
		verdict := "applied"
		switch {
		case r.PartlyApplied:
			verdict = "REFUSED and NOT fully undone, the running state differs from before: " + r.Error
		case !r.Applied:
			verdict = "REFUSED, the running configuration stays: " + r.Error
		}
		fmt.Fprintf(w, "last reload at %s (%s): %s\n", r.At.Format(time.RFC3339), r.Why, verdict)
	}
	fmt.Fprintf(w, "entities %d of %d  overflowed %d  learner: %d samples parsed, %d failed, %d connections\n\n",
		s.Entities, s.MaxEntities, s.Overflowed, s.Learner.Parsed, s.Learner.Failed, s.Learner.Connections)
	if k := s.KafkaQuotas; k != nil {
		last := "never"
		if !k.LastImport.IsZero() {
			last = k.LastImport.Format(time.TimeOnly)
		}
		fmt.Fprintf(w, "kafka quotas: %d clients, client <default> %v, %d users, %d skipped, %d left out for room; %d imports, %d failed, last %s\n\n",
			k.Clients, k.ClientDefault, k.Users, k.Skipped, k.LeftOut, k.Imports, k.Failures, last)
	}
	if c := s.Cluster; c != nil {
		writeCluster(w, c)
	}
	for _, o := range s.Objectives {
		held := "best-effort"
		if o.Trims != "" && o.Trims != o.Direction { // the other direction's, when its own did not help
			held += " " + o.Trims
		}
		fmt.Fprintf(w, "latency objective %s %s p99 %.0f ms: %s, p99 %.1f ms over 10 s (%d requests), %s held to %.2f: %s\n",
			o.Entity, o.Direction, o.ObjectiveMillis, o.State, o.P99Millis, o.Requests, held, o.Level, o.Why)
	}
	if len(s.Objectives) > 0 {
		fmt.Fprintln(w)
	}
	for _, d := range s.Directions {
		if !d.Enabled {
			fmt.Fprintf(w, "%s: not governed (capacity -1)\n\n", d.Direction)
			continue
		}
		alert := "no"
		if d.Overcommit {
			alert = "YES"
		}
		fmt.Fprintf(w, "%s: capacity %s  C %s  H %s  R/C %.3f  Σgreen/C %.3f  overcommit %s  active %d  standby %d\n",
			d.Direction, rate(d.Capacity), rate(d.C), rate(d.H), d.PromisedRatio, d.GreenRatio, alert, d.Active, d.Standby)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  TYPE\tNAME\tSTATE\tRATE\tEFF.RES\tLIMIT\tDYN.LIMIT\tHELD\tDELAY")
		for _, e := range d.Entities {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0fms\n", e.Kind, nameOr(e.Name), e.State, rate(e.Rate), rate(e.EffectiveReservation),
				rate(e.Limit), rate(e.DynamicLimit), rate(e.HeldRate), e.QueueDelayMillis)
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
}

// newExplainCmd: `sluice explain [-o text|json] NAME|ADDRESS` shows how an
// entity's limit was derived, or which entity holds a connection; with
// --config it resolves a client offline, from the file.
func newExplainCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "explain [-o text|json] [--socket PATH] NAME|ADDRESS   (a client-id, a topic-partition, kind:name, or a client's IP, IP:port or IP:port->IP:port)",
		Short: "show how an entity's dynamic limit was derived, or which entity holds a connection and why",
		Args:  maxArgs(1, "give one entity name or client address"),
		Annotations: annotations([]string{"sluice explain --config FILE [--client-id ID] [--user USER] [--topic-partition TOPIC-N] [-o text|json]   (offline, from the file)"},
			"sluice explain orders-consumer", "sluice explain topic-partition:orders-0", "sluice explain -o json client:backfill", "sluice explain 10.1.2.3:52314",
			"sluice explain --config /etc/sluice/sluice.yaml --client-id orders-app --user alice"),
		ValidArgsFunction: completeEntities(true),
	}
	socket := addSocketFlag(c)
	output := addOutputFlag(c)
	var q offlineQuery
	c.Flags().StringVar(&q.config, "config", "", "resolve offline from this configuration `file`, without an agent (with --client-id, --user, --topic-partition)")
	c.Flags().StringVar(&q.clientID, "client-id", "", "with --config: the client's client.id (an `id`)")
	c.Flags().StringVar(&q.user, "user", "", "with --config: the client's SASL `user`")
	c.Flags().StringVar(&q.topicPartition, "topic-partition", "", "with --config: a `topic-partition` its requests name (TOPIC-PARTITION, such as orders-0)")
	c.MarkFlagFilename("config", "yaml", "yml")
	c.RunE = func(c *cobra.Command, args []string) error {
		return runExplain(*socket, q, args, output.json(), c.OutOrStdout())
	}
	return c
}

// runExplain explains args[0] as the running agent at socket sees it, or
// q offline from its file.
func runExplain(socket string, q offlineQuery, args []string, asJSON bool, stdout io.Writer) error {
	if q.config != "" {
		if len(args) != 0 {
			return usageError{errors.New("explain --config resolves --client-id, --user and --topic-partition offline; an entity name asks the running agent instead: give one or the other")}
		}
		return explainOffline(stdout, q, asJSON)
	}
	if q.given() {
		return usageError{errors.New("explain: --client-id, --user and --topic-partition resolve offline: give --config FILE too")}
	}
	if len(args) != 1 {
		return usageError{errors.New("explain: give one entity name (a client-id, a topic-partition, or kind:name) or a client address (IP, IP:port, or IP:port->IP:port)")}
	}
	if conn, ok := parseConnection(args[0]); ok {
		return explainConnections(stdout, socket, conn, asJSON)
	}
	s, err := status.Query(socket)
	if err != nil {
		return err
	}
	views := s.Find(args[0])
	if len(views) == 0 {
		return fmt.Errorf("explain: no entity %q in the last cycle (sluice status lists them)", args[0])
	}
	var explained []explanation
	for i, e := range views {
		d := s.Directions[0]
		if i > 0 || !containsEntity(d, e) {
			d = s.Directions[1]
		}
		if asJSON {
			d.Entities = nil
			explained = append(explained, explanation{Direction: d, Entity: e})
			continue
		}
		writeExplain(stdout, d, e)
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(explained)
	}
	return nil
}

// connectionFilter is a connection `sluice explain` was given: a client
// address, and the client's port and the broker's address and port when
// given too.
type connectionFilter struct {
	peer  netip.Addr
	port  uint16         // 0: any
	local netip.AddrPort // zero: any
}

// parseConnection reads IP, IP:port or IP:port->IP:port (what `sluice
// status`, ss and the agent's log print). Anything else is an entity name
// (write client:NAME for a client-id that looks like an address).
func parseConnection(arg string) (connectionFilter, bool) {
	var f connectionFilter
	peer, local, fourTuple := strings.Cut(arg, "->")
	if fourTuple {
		l, err := netip.ParseAddrPort(local)
		if err != nil {
			return f, false
		}
		f.local = l
	}
	if ap, err := netip.ParseAddrPort(peer); err == nil {
		f.peer, f.port = ap.Addr(), ap.Port()
		return f, true
	}
	if a, err := netip.ParseAddr(peer); err == nil && !fourTuple {
		f.peer = a
		return f, true
	}
	return f, false
}

// explainConnections shows the connections f names: which entity holds
// each direction, by which rule, and which request bound it when.
func explainConnections(w io.Writer, socket string, f connectionFilter, asJSON bool) error {
	views, err := status.QueryConnections(socket, f.peer)
	if err != nil {
		return err
	}
	var match []status.ConnectionView
	for _, v := range views {
		peer, _ := netip.ParseAddrPort(v.Peer)
		local, _ := netip.ParseAddrPort(v.Local)
		if (f.port == 0 || peer.Port() == f.port) && (!f.local.IsValid() || local == f.local) {
			match = append(match, v)
		}
	}
	if asJSON {
		if match == nil {
			match = []status.ConnectionView{}
		}
		return json.NewEncoder(w).Encode(match)
	}
	if len(match) == 0 {
		return fmt.Errorf("explain: the data path holds no connection from %v", f.peer)
	}
	for _, v := range match {
		fmt.Fprintf(w, "%s -> %s (%s)%s\n", v.Peer, v.Local, v.Listener, map[bool]string{true: ", closing"}[v.Closing])
		if v.Produce == v.Fetch {
			fmt.Fprintf(w, "  produce, fetch: %s\n", v.Produce)
		} else {
			fmt.Fprintf(w, "  produce: %s\n  fetch:   %s\n", v.Produce, v.Fetch)
		}
		fmt.Fprintf(w, "  rule: %s\n", v.Rule)
		if v.Since != nil {
			by := v.BoundBy
			if by == "" {
				by = "no request"
			}
			fmt.Fprintf(w, "  bound by %s (%s) at %s\n", by, v.Reason, v.Since.Format(time.RFC3339))
		}
	}
	return nil
}

// explanation is `explain -o json`'s element: the entity's view and its
// direction's (the socket's schema for both; the direction's entity list
// left out).
type explanation struct {
	Direction status.DirectionView `json:"direction"`
	Entity    status.EntityView    `json:"entity"`
}

func containsEntity(d status.DirectionView, e status.EntityView) bool {
	for _, x := range d.Entities {
		if x.ID == e.ID {
			return true
		}
	}
	return false
}

func writeExplain(w io.Writer, d status.DirectionView, e status.EntityView) {
	fmt.Fprintf(w, "%s %s, %s direction (entity id %d)\n", e.Kind, nameOr(e.Name), d.Direction, e.ID)
	fmt.Fprintf(w, "  parameters      reservation %s (%s), weight %g (%s), limit %s (%s)\n", rate(e.Reservation), e.Sources.Reservation,
		e.Weight, e.Sources.Weight, rate(e.Limit), e.Sources.Limit)
	fmt.Fprintf(w, "  measured        %s over the rate window; throttled last cycle: %v\n", rate(e.Rate), e.Throttled)
	fmt.Fprintf(w, "  state           %s\n", e.State)
	writeLatency(w, e.Latency)
	if e.State != "active" {
		fmt.Fprintf(w, "  standby limit   min(limit, max(reservation, H = %s, min_limit = %s)) = %s\n", rate(d.H), rate(d.MinLimit), rate(e.DynamicLimit))
		return
	}
	fmt.Fprintf(w, "  step 1  effRes  reservation × scale %.4f, raised towards min_limit %s × floor scale %.4f = %s   (C %s, (R+floors)/C %.3f)\n",
		d.Scale, rate(d.MinLimit), d.FloorScale, rate(e.EffectiveReservation), rate(d.C), d.PromisedRatio)
	demandWhy := "max(measured, min_demand)"
	if e.Throttled {
		demandWhy = "throttled: claims its limit"
	}
	fmt.Fprintf(w, "  step 2  demand  %s   (%s)\n", rate(e.Demand), demandWhy)
	fmt.Fprintf(w, "  step 3  green   min(effRes, demand) = %s\n", rate(e.Green))
	fmt.Fprintf(w, "  step 4  extra   %s from spare, water-filled by weight\n", rate(e.Extra))
	fmt.Fprintf(w, "  step 5  headroom %s of spare left after every claim\n", rate(e.Headroom))
	if e.HeldBy != "" {
		fmt.Fprintf(w, "  step 6  limit   clamp(green + extra + headroom, effRes, limit), then held to %s by %s\n", rate(e.DynamicLimit), e.HeldBy)
	} else {
		fmt.Fprintf(w, "  step 6  limit   clamp(green + extra + headroom, effRes, limit) = %s\n", rate(e.DynamicLimit))
	}
	fmt.Fprintf(w, "  shaper          queue delay %.1f ms, %d packets dropped last cycle\n\n", e.QueueDelayMillis, e.DroppedPackets)
}

// writeLatency says the entity's request latency at the NIC, per API.
func writeLatency(w io.Writer, views []status.LatencyView) {
	for _, v := range views {
		what := ""
		if v.API == "fetch" {
			what = ", time to first byte: includes the broker's long-poll wait"
		}
		fmt.Fprintf(w, "  latency %-7s p50 %.1f ms, p99 %.1f ms over 10 s (%d requests); p50 %.1f ms, p99 %.1f ms over 1 min (%d)   (at the NIC, last byte in to first byte out%s)\n",
			v.API, v.P50Millis, v.P99Millis, v.Requests, v.P50MinuteMillis, v.P99MinuteMillis, v.RequestsMinute, what)
	}
}

func nameOr(n string) string {
	if n == "" {
		return "-"
	}
	return n
}

func rate(b status.Bps) string {
	v := float64(b)
	if math.IsInf(v, 1) {
		return "∞"
	}
	return config.FormatRate(v) + "/s"
}

// writeCluster shows the cluster budgets: this host's standing, the topic,
// and per budget the cluster-wide numbers, this host's share and why.
func writeCluster(w io.Writer, c *status.ClusterView) {
	mode := ""
	if c.Mode == "shadow" {
		mode = "  SHADOW: shares computed and reported, none applied"
	}
	state := c.Lease
	if c.Rebuilding {
		state += ", rebuilding"
	}
	fmt.Fprintf(w, "cluster %s  broker %d  epoch %d  lease %s  round %d (lowered to %d)%s\n", c.Name, c.Broker, c.Epoch, state, c.Round, c.Processed, mode)
	caught := "behind"
	if c.Topic.CaughtUp {
		caught = "caught up"
	}
	fmt.Fprintf(w, "  topic %s: %s, lag %d, published %d (failed %d, withheld %d), read %d, undecodable %d, topic errors %d\n",
		c.Topic.Name, caught, c.Topic.Lag, c.Published, c.Topic.PublishFailed, c.Withheld, c.Topic.Delivered, c.Topic.Undecodable, c.Topic.TopicErrors)
	if c.Topic.LastError != "" {
		fmt.Fprintf(w, "  last topic error: %s\n", c.Topic.LastError)
	}
	var ignored []string
	for _, v := range []string{"duplicate", "stale", "fenced", "conflict", "malformed", "foreign", "unknown_broker", "round_jump"} {
		if n := c.Reports[v]; n > 0 {
			ignored = append(ignored, fmt.Sprintf("%s %d", v, n))
		}
	}
	if len(ignored) > 0 {
		fmt.Fprintf(w, "  reports ignored: %s\n", strings.Join(ignored, ", "))
	}
	if n := c.Reports["outside"]; n > 0 { // counted, not ignored: the budget holds an allowance for them
		fmt.Fprintf(w, "  reports from brokers outside this configuration (counted outside the budget): %d\n", n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  BUDGET\tLIMIT\tRESERVED\tΣ USAGE\tSHARE\tTARGET\tUSAGE HERE\tWHY")
	for _, b := range c.Budgets {
		usage := rate(status.Bps(b.Usage))
		if b.HeldBack {
			usage += " (held back)"
		}
		fmt.Fprintf(tw, "  %s %s %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.Kind, b.Name, b.Direction, rate(b.Limit), rate(b.Reservation),
			rate(status.Bps(b.SumUsage)), rate(b.Share), rate(b.Target), usage, b.Why)
	}
	tw.Flush()
	for _, b := range c.Budgets {
		var per []string
		for _, br := range b.Brokers {
			if !br.Reported {
				per = append(per, fmt.Sprintf("%d: no report", br.Broker))
				continue
			}
			live := ""
			if !br.Live {
				live = " (not live)"
			}
			per = append(per, fmt.Sprintf("%d: uses %s, applies %s, leads %d%s", br.Broker, rate(status.Bps(br.Usage)), rate(br.Applied), br.Led, live))
		}
		fmt.Fprintf(w, "  %s %s %s by broker: %s\n", b.Kind, b.Name, b.Direction, strings.Join(per, "; "))
		if b.LimitFrom != "" && b.LimitFrom != "config" || b.HostLimit != b.Limit {
			fmt.Fprintf(w, "  %s %s %s limit from %s: this host reads %s; the round split %s (the smallest any live broker reported)\n",
				b.Kind, b.Name, b.Direction, b.LimitFrom, rate(b.HostLimit), rate(b.Limit))
		}
	}
	fmt.Fprintln(w)
}
