package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/config"
)

// log_format json writes one JSON object per record.
func TestLogHandlerJSON(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewLogHandler(&buf, config.LogJSON, slog.LevelInfo))
	log.Info("attached", "interface", "eth0")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec["msg"] != "attached" || rec["interface"] != "eth0" {
		t.Errorf("JSON record %q: %v %v", buf.String(), rec, err)
	}
}

// Writing to the journal's stream, each line carries its syslog priority;
// anywhere else, none.
func TestLogHandlerJournalPriorities(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino))
	log := slog.New(NewLogHandler(f, config.LogText, slog.LevelDebug)).With("component", "test")
	log.Error("e")
	log.Warn("w")
	log.Info("i")
	log.Debug("d")
	data, _ := os.ReadFile(f.Name())
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	for i, want := range []string{"<3>", "<4>", "<6>", "<7>"} {
		if i >= len(lines) || !strings.HasPrefix(lines[i], want+"time=") || !strings.Contains(lines[i], "component=test") {
			t.Errorf("line %d %q, want it to start with %s", i, lines, want)
		}
	}
	var plain bytes.Buffer // not the journal's stream
	slog.New(NewLogHandler(&plain, config.LogText, slog.LevelInfo)).Warn("w")
	if strings.HasPrefix(plain.String(), "<") {
		t.Errorf("a priority prefix outside the journal: %q", plain.String())
	}
}
