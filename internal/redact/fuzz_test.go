package redact

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// marker is the secret FuzzRedact hides: nothing but a generated secret
// value spells it.
const marker = "MRK7x9q-leak"

// FuzzRedact builds a YAML document from the fuzzer's bytes, with marker
// under secret-named keys in every shape the generator knows (plain,
// quoted, tagged, anchored and block scalars, multi-line plain scalars,
// block and flow mappings and sequences nested in each other, values an
// alias or a merge key brings from an anchor defined under another key,
// commented-out secrets), sometimes breaks it with a line that does not
// parse, and checks that Config's output never holds marker. A document
// left whole must parse, and its output must parse again.
func FuzzRedact(f *testing.F) {
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Whatever the bytes, as a file: no panic.
		Config(data)

		doc, broken := (&docGen{data: data}).doc()
		out, err := Config([]byte(doc))
		if bytes.Contains(out, []byte(marker)) {
			t.Fatalf("the secret is in the output (err %v)\n--- input:\n%s--- output:\n%s", err, doc, out)
		}
		if err != nil && strings.Contains(err.Error(), marker) {
			t.Fatalf("the secret is in the error: %v\n--- input:\n%s", err, doc)
		}
		if broken {
			return
		}
		if err != nil {
			t.Fatalf("a well-formed document did not parse: %v\n--- input:\n%s", err, doc)
		}
		var n yaml.Node
		if err := yaml.Unmarshal(out, &n); err != nil {
			t.Fatalf("the output does not parse: %v\n--- input:\n%s--- output:\n%s", err, doc, out)
		}
	})
}

// Key names the generator uses: secret ones (every value under them is
// secret), and others (their values hold marker only under a secret key).
var (
	secretKeys = []string{"password", "Password", "PASSWORD", "sasl_password", "sasl-password", "saslPassword",
		`"password"`, `'secret'`, "client_secret", "bearer_token", "token", "tokens", "key", "private_key",
		"privateKey", "credentials", "Credentials", "basic_auth_users", "api-key", "passphrase",
		"access_token", "my key", "secrets", "jaas_config", "passwd", "Sasl.Password", `"Client-Secret"`}
	plainKeys = []string{"mechanism", "username", "name", "interfaces", "sasl", "tls", "metrics", "entities",
		"nested", "a", "b", "items", "config", "'quoted'", `"dq"`, "orders-app"}
	scalars = []string{"PLAIN", "eth0", "100MiB", "sluice", "x", "10.0.0.0/24", "true", "42", "orders-app", "~", `""`}
)

// docGen writes a document as its bytes choose; when they run out, every
// choice is the first, which ends the document.
type docGen struct {
	data          []byte
	pos           int
	anchors       int
	prelude       []string // top-level entries defining anchors, before the rest
	inPrelude     int      // > 0 while writing a prelude entry: no alias of what follows
	secretAnchors []string // anchors of values holding marker: aliased only under secret keys
	plainAnchors  []string // anchors of other values
}

func (g *docGen) pick(n int) int {
	if g.pos >= len(g.data) {
		return 0
	}
	g.pos++
	return int(g.data[g.pos-1]) % n
}

func (g *docGen) oneOf(s []string) string { return s[g.pick(len(s))] }

func (g *docGen) anchor() string {
	g.anchors++
	return fmt.Sprintf("a%d", g.anchors)
}

func pad(n int) string { return strings.Repeat(" ", n) }

// broken are lines that do not parse, at the top level.
var broken = []string{"\tbroken: tab\n", "]\n", "foo: bar: baz\n", "@reserved\n", "x: 'unclosed\n", "{\n",
	"- stray\n", "key with tab:\tx: y\n", "? [\n", "*undefined\n"}

// doc returns the document and whether a broken line is in it.
func (g *docGen) doc() (string, bool) {
	var body []string
	for n := 1 + g.pick(4); n > 0; n-- {
		body = append(body, g.entry(0, 0, true))
	}
	entries := append(g.prelude, body...)
	if g.pick(4) != 1 {
		return strings.Join(entries, ""), false
	}
	at := g.pick(len(entries) + 1)
	entries = append(entries[:at], append([]string{g.oneOf(broken)}, entries[at:]...)...)
	return strings.Join(entries, ""), true
}

// entry is a block mapping entry at column ind, ending in a newline: a
// secret key with marker in its value, or another key.
func (g *docGen) entry(ind, depth int, comment bool) string {
	var b strings.Builder
	if comment && g.pick(5) == 0 {
		b.WriteString(g.comment(ind))
	}
	if depth >= 4 || g.pick(2) == 0 {
		b.WriteString(pad(ind) + g.oneOf(secretKeys) + ":" + g.secret(ind, depth+1) + "\n")
	} else {
		b.WriteString(pad(ind) + g.oneOf(plainKeys) + ":" + g.plain(ind, depth+1) + "\n")
	}
	return b.String()
}

// comment is a commented-out secret at column ind.
func (g *docGen) comment(ind int) string {
	k := g.oneOf(secretKeys)
	switch g.pick(6) {
	case 0:
		return pad(ind) + "# " + k + ": " + marker + "\n"
	case 1:
		return pad(ind) + "#" + k + ": " + marker + "\n"
	case 2:
		return pad(ind) + "# " + k + ": |\n" + pad(ind) + "#   " + marker + "\n"
	case 3:
		return pad(ind) + "# sasl: {" + k + ": " + marker + ", user: x}\n"
	case 4:
		return pad(ind) + "# - " + k + ": " + marker + "\n"
	default:
		return pad(ind) + "# the old " + k + ": " + marker + "\n"
	}
}

// secret is the value of a secret key at column ind, holding marker: the
// text after the colon, starting with a blank (on the key's line) or a
// newline (below it).
func (g *docGen) secret(ind, depth int) string {
	if depth > 6 {
		return " " + marker
	}
	in := pad(ind + 2)
	switch g.pick(16) {
	case 0:
		return " " + marker
	case 1:
		return ` "` + g.oneOf(scalars[:9]) + `\t` + marker + `"`
	case 2:
		return " '" + marker + " it''s'"
	case 3:
		return " |" + g.oneOf([]string{"", "-", "+"}) + "\n" + in + g.oneOf(scalars) + "\n" + in + marker + "\n" + in + "# not a comment"
	case 4:
		return " >-\n" + in + g.oneOf(scalars) + "\n\n" + in + marker
	case 5:
		return " " + g.oneOf(scalars[:9]) + "\n" + in + marker
	case 6:
		return " " + g.flowSecret(depth)
	case 7: // a block mapping: marker somewhere below
		s := "\n" + pad(ind+2) + g.oneOf(plainKeys) + ":" + g.secret(ind+2, depth+1) + "\n"
		if g.pick(2) == 0 {
			s += g.entry(ind+2, depth+1, true)
		}
		return strings.TrimSuffix(s, "\n")
	case 8: // a block sequence, indented or not
		seq := ind + 2*g.pick(2)
		return "\n" + g.item(seq, depth, true) + g.item(seq, depth, g.pick(2) == 0)
	case 9: // an alias of a value defined under another key
		return " *" + g.secretAnchor(depth)
	case 10: // a merge key bringing it
		a := g.secretAnchor(depth)
		if g.pick(2) == 0 {
			return " {<<: *" + a + ", y: 1}"
		}
		return "\n" + in + "<<: *" + a + "\n" + in + "z: 2"
	case 11:
		a := g.anchor()
		return " &" + a + " " + g.oneOf([]string{marker, `"` + marker + `"`})
	case 12:
		return " " + g.oneOf([]string{"!!str", "!vault", "!<tag:sluice,2024:s>"}) + " " + marker
	case 13:
		return " " + marker + " # a comment"
	case 14:
		return " # a comment\n" + in + g.oneOf(plainKeys) + ": " + marker
	default: // a secret key under a secret key
		return "\n" + pad(ind+2) + g.oneOf(secretKeys) + ":" + g.secret(ind+2, depth+1)
	}
}

// item is a block sequence item at column ind holding marker (if secret)
// or not, ending in a newline.
func (g *docGen) item(ind, depth int, secret bool) string {
	switch g.pick(3) {
	case 0:
		if secret {
			return pad(ind) + "- " + g.flowSecret(depth+1) + "\n"
		}
		return pad(ind) + "- " + g.oneOf(scalars) + "\n"
	case 1: // a mapping in the item: its first entry on the dash's line
		var e string
		if secret {
			e = pad(ind+2) + g.oneOf(plainKeys) + ":" + g.secret(ind+2, depth+1) + "\n"
		} else {
			e = g.entry(ind+2, depth+1, false)
		}
		return pad(ind) + "- " + e[ind+2:]
	default:
		if secret {
			return pad(ind) + "-" + g.secret(ind, depth+1) + "\n"
		}
		return pad(ind) + "-" + g.plain(ind, depth+1) + "\n"
	}
}

// flowSecret is a flow value holding marker.
func (g *docGen) flowSecret(depth int) string {
	if depth > 6 {
		return marker
	}
	switch g.pick(6) {
	case 0:
		return marker
	case 1:
		return `"` + marker + `"`
	case 2:
		return "{" + g.oneOf(plainKeys) + ": " + g.flowSecret(depth+1) + ", " + g.oneOf(plainKeys[:4]) + "2: " + g.oneOf(scalars) + "}"
	case 3:
		return "[" + g.oneOf(scalars) + ", " + g.flowSecret(depth+1) + "]"
	case 4:
		return "*" + g.secretAnchor(depth)
	default:
		return "{" + g.oneOf(secretKeys) + ": " + g.flowSecret(depth+1) + "}"
	}
}

// secretAnchor returns an anchor whose value holds marker, defined in the
// prelude under a key that is not secret: a new one, or one made before.
func (g *docGen) secretAnchor(depth int) string {
	if len(g.secretAnchors) > 0 && g.pick(3) == 0 {
		return g.oneOf(g.secretAnchors)
	}
	a := g.anchor()
	g.inPrelude++
	defer func() { g.inPrelude-- }()
	var v string
	if g.pick(2) == 0 {
		v = g.secret(0, depth+2) // block or scalar, at column 0
		if strings.HasPrefix(v, " *") || strings.HasPrefix(v, " &") {
			v = " [" + v[1:] + "]" // an alias or anchored value takes no anchor
		}
	} else {
		v = " {x: " + g.flowSecret(depth+2) + ", y: " + g.oneOf(scalars) + "}"
	}
	g.prelude = append(g.prelude, "def"+a+": &"+a+v+"\n")
	g.secretAnchors = append(g.secretAnchors, a)
	return a
}

// plain is the value of a key that is not secret: marker only under
// secret keys below it.
func (g *docGen) plain(ind, depth int) string {
	if depth > 4 {
		return " " + g.oneOf(scalars)
	}
	switch g.pick(8) {
	case 0:
		return " " + g.oneOf(scalars)
	case 1: // a block mapping
		return "\n" + strings.TrimSuffix(g.entry(ind+2, depth, true)+g.entry(ind+2, depth, true), "\n")
	case 2: // a flow mapping
		if g.pick(2) == 0 {
			return " {" + g.oneOf(plainKeys) + ": " + g.oneOf(scalars) + ", " + g.oneOf(secretKeys) + ": " + g.flowSecret(depth) + "}"
		}
		return " {" + g.oneOf(secretKeys) + ": " + g.flowSecret(depth) + "}"
	case 3: // a block sequence
		return "\n" + g.item(ind+2, depth, false) + strings.TrimSuffix(g.item(ind+2, depth, false), "\n")
	case 4: // an anchored mapping, for aliases and merge keys
		a := g.anchor()
		v := " &" + a + "\n" + strings.TrimSuffix(g.entry(ind+2, depth, false), "\n")
		g.plainAnchors = append(g.plainAnchors, a)
		return v
	case 5:
		if len(g.plainAnchors) > 0 && g.inPrelude == 0 {
			return " *" + g.oneOf(g.plainAnchors)
		}
		return " " + g.oneOf(scalars)
	case 6: // a merge key bringing another value, and a secret
		if len(g.plainAnchors) > 0 && g.inPrelude == 0 {
			return "\n" + pad(ind+2) + "<<: *" + g.oneOf(g.plainAnchors) + "\n" + strings.TrimSuffix(g.entry(ind+2, depth, false), "\n")
		}
		return " /etc/sluice/x"
	default:
		return " " + g.oneOf(scalars) + " # " + g.oneOf(plainKeys)
	}
}
