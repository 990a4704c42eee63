// Command faildigest runs a `go test -json` command, prints its output as
// `go test -v` would, and ends with a digest of every failed test's last
// lines. CI keeps only part of a long log (the start of the first failure
// and the end); the line that says why a scenario failed is often printed
// minutes before the end, out of sight. The digest repeats it where it is
// seen. The command's exit status is faildigest's.
//
//	faildigest -- go test -json -run ... ./test/e2e/ -args ...
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: faildigest -- go test -json ...")
		os.Exit(2)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "faildigest:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "faildigest:", err)
		os.Exit(2)
	}
	d := newDigest()
	if err := d.follow(out, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "faildigest: reading the test output:", err)
	}
	waitErr := cmd.Wait()
	d.write(os.Stdout)
	var exit *exec.ExitError
	switch {
	case errors.As(waitErr, &exit):
		os.Exit(exit.ExitCode())
	case waitErr != nil:
		fmt.Fprintln(os.Stderr, "faildigest:", waitErr)
		os.Exit(2)
	}
}

// follow copies the events' output to w as it arrives and keeps what the
// digest needs; a line that is not an event is copied as it is.
func (d *digest) follow(r io.Reader, w io.Writer) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		if text, ok := d.add(sc.Bytes()); ok {
			io.WriteString(w, text)
		} else {
			fmt.Fprintf(w, "%s\n", sc.Bytes())
		}
	}
	return sc.Err()
}
