// Command gen writes sluice's Grafana dashboard (make dashboard).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sluice-dev/sluice/deploy/grafana"
)

func main() {
	out := flag.String("out", "deploy/grafana/sluice-dashboard.json", "where to write the dashboard")
	flag.Parse()
	data, err := grafana.Dashboard()
	if err == nil {
		err = os.WriteFile(*out, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
