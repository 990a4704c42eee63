// Command gen writes THIRD_PARTY_NOTICES for the binary built from the
// module in the current directory (run from the repository's root), as
// deploy/pkg does for every package build:
//
//	go run ./deploy/notices/gen -arch amd64,arm64 -out THIRD_PARTY_NOTICES
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/sluice-dev/sluice/deploy/notices"
)

func main() {
	arches := flag.String("arch", "amd64,arm64", "architectures the binary is built for")
	out := flag.String("out", "-", "file to write (- for standard output)")
	flag.Parse()
	data, err := notices.Generate(".", strings.Split(*arches, ","))
	if err != nil {
		fmt.Fprintln(os.Stderr, "notices:", err)
		os.Exit(1)
	}
	if *out == "-" {
		os.Stdout.Write(data)
		return
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "notices:", err)
		os.Exit(1)
	}
}
