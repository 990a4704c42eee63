package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/config"
)

// NewLogHandler is the agent's log handler: logfmt (text) or JSON lines on
// w. When w is the stream systemd's journal reads (JOURNAL_STREAM names
// it), each line starts with its syslog priority (<3> error, <4> warn,
// <6> info, <7> debug), which journald takes as the entry's priority
// (SyslogLevelPrefix=, on by default): `journalctl -u sluice -p warning`
// then shows warnings and errors only.
func NewLogHandler(w io.Writer, format string, level slog.Leveler) slog.Handler {
	prefixed := &priorityWriter{w: w}
	if !isJournalStream(w) {
		prefixed = nil
	}
	out := io.Writer(w)
	if prefixed != nil {
		out = prefixed
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(out, opts)
	if format == config.LogJSON {
		h = slog.NewJSONHandler(out, opts)
	}
	if prefixed == nil {
		return h
	}
	return &journalHandler{inner: h, out: prefixed}
}

// journalHandler sets the priority prefix of the record being written.
type journalHandler struct {
	inner slog.Handler
	out   *priorityWriter
}

func (h *journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	h.out.prefix = syslogPriority(r.Level)
	return h.inner.Handle(ctx, r)
}

func (h *journalHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return &journalHandler{inner: h.inner.WithAttrs(a), out: h.out}
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	return &journalHandler{inner: h.inner.WithGroup(name), out: h.out}
}

// priorityWriter prefixes each record (one Write per record, as slog's
// handlers write) with the priority journalHandler set under mu.
type priorityWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
}

func (p *priorityWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}

func syslogPriority(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "<3>"
	case l >= slog.LevelWarn:
		return "<4>"
	case l >= slog.LevelInfo:
		return "<6>"
	default:
		return "<7>"
	}
}

// isJournalStream: w is a file whose device and inode are the ones
// systemd put in JOURNAL_STREAM.
func isJournalStream(w io.Writer) bool {
	f, ok := w.(*os.File)
	stream := os.Getenv("JOURNAL_STREAM")
	if !ok || stream == "" {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return stream == fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}
