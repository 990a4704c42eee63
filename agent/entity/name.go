package entity

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameBytes bounds an entity name: client-ids are chosen by clients (a
// Kafka client-id may be 32 KiB of anything) and become metric labels,
// status lines and pinned names (at most 254 bytes).
const MaxNameBytes = 200

// hashSuffixLen is the hex digits of SHA-256 that keep two rewritten names
// apart: 48 bits, so two different client-ids do not meet by chance.
const hashSuffixLen = 12

// SafeName returns a client-chosen string as an entity name: unchanged
// when it is valid UTF-8 of printable characters within MaxNameBytes;
// otherwise with invalid bytes and non-printable characters escaped (Go
// quoting, as \xff, \x00, \x1b), cut to fit, and suffixed with "~" and a
// hash of the original, so that distinct strings stay distinct entities and
// no rewritten name can equal an ordinary one that lacks the suffix.
func SafeName(raw string) string {
	if len(raw) <= MaxNameBytes && printable(raw) {
		return raw
	}
	quoted := strconv.Quote(raw)
	escaped := quoted[1 : len(quoted)-1]
	sum := sha256.Sum256([]byte(raw))
	suffix := "~" + hex.EncodeToString(sum[:])[:hashSuffixLen]
	if room := MaxNameBytes - len(suffix); len(escaped) > room {
		escaped = escaped[:room]
		// Never end inside an escape sequence or a multi-byte character.
		if i := strings.LastIndexByte(escaped, '\\'); i >= 0 && i >= room-10 {
			escaped = escaped[:i]
		}
		for len(escaped) > 0 && !utf8.ValidString(escaped) {
			escaped = escaped[:len(escaped)-1]
		}
	}
	return escaped + suffix
}

func printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return false
		}
	}
	return utf8.ValidString(s)
}
