package redact

import (
	"regexp"
	"strings"
)

// Line by line redaction, for a file that does not parse as YAML, for
// comments (commented-out YAML is still YAML an operator may uncomment),
// and for the text of scalars under other keys (a JAAS line, a URL with a
// password in it). Without a parse it cannot know where a value ends, so
// it errs on the side of hiding too much: from a secret-looking key (or an
// anchor a redacted value refers to) to the end of its line, then every
// line that may continue the value.

// keyToken is a key (plain, single- or double-quoted) and its separator:
// ':' as in YAML, '=' as in JAAS, properties and environment files.
var keyToken = regexp.MustCompile(`("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s:=,\[\]{}#"']+)[ \t]*[:=]`)

// anchorToken and aliasToken are YAML anchors (&name) and aliases (*name)
// where a token starts.
var (
	anchorToken = regexp.MustCompile(`(?:^|[\s\[{,:])&([^\s,\[\]{}]+)`)
	aliasToken  = regexp.MustCompile(`(?:^|[\s\[{,:])\*([^\s,\[\]{}]+)`)
)

// userinfo is the password of a URL (scheme://user:password@host).
var userinfo = regexp.MustCompile(`(://[^\s/:@]*):[^\s/@]*@`)

// redactText redacts text line by line; it returns text unchanged when
// nothing in it looks secret.
func redactText(text string) string {
	if text == "" {
		return text
	}
	lines := strings.Split(text, "\n")
	lex := lexLines(lines)
	// An alias in a redacted value makes its anchor's value secret, and
	// that value may hold aliases of its own: repeat until no new anchor.
	anchors := map[string]bool{}
	for {
		out, aliases := redactPass(lines, lex, anchors)
		grew := false
		for _, a := range aliases {
			if !anchors[a] {
				anchors[a], grew = true, true
			}
		}
		if !grew {
			for i, l := range out {
				out[i] = userinfo.ReplaceAllString(l, "$1:"+Redacted+"@")
			}
			return strings.Join(out, "\n")
		}
	}
}

// lexState is where a line starts: inside a quoted scalar (the quote) or
// inside flow collections (their depth), and where its comment starts (-1:
// none).
type lexState struct {
	quote     byte
	depth     int
	commentAt int
}

// lexLines follows quotes, flow brackets and comments through the lines.
func lexLines(lines []string) []lexState {
	out := make([]lexState, len(lines))
	var st lexState
	for i, l := range lines {
		out[i] = lexState{quote: st.quote, depth: st.depth, commentAt: -1}
		st = lexLine(l, st)
		out[i].commentAt = st.commentAt
	}
	return out
}

// lexLine follows l from st as YAML would, roughly: a quote or bracket
// opens only where a token starts, so an apostrophe in prose opens no
// string. It returns the state where l ends and where its comment starts.
func lexLine(l string, st lexState) lexState {
	st.commentAt = -1
	for j := 0; j < len(l); j++ {
		c := l[j]
		switch st.quote {
		case '"':
			if c == '\\' {
				j++
			} else if c == '"' {
				st.quote = 0
			}
			continue
		case '\'':
			if c == '\'' {
				if j+1 < len(l) && l[j+1] == '\'' {
					j++
				} else {
					st.quote = 0
				}
			}
			continue
		}
		switch c {
		case '#':
			if j == 0 || l[j-1] == ' ' || l[j-1] == '\t' {
				st.commentAt = j
				return st
			}
		case '"', '\'':
			if tokenStart(l, j) {
				st.quote = c
			}
		case '[', '{':
			if tokenStart(l, j) {
				st.depth++
			}
		case ']', '}':
			if st.depth > 0 {
				st.depth--
			}
		}
	}
	return st
}

// tokenStart reports whether a scalar or collection may start at l[j]:
// at the start of the line, or after an indicator (':', '-', '?', ',',
// '[', '{') and any anchors and tags.
func tokenStart(l string, j int) bool {
	if j > 0 && !strings.ContainsRune(" \t[{,", rune(l[j-1])) {
		return false
	}
	before := strings.TrimRight(l[:j], " \t")
	for {
		if before == "" {
			return true
		}
		k := strings.LastIndexAny(before, " \t") + 1
		if word := before[k:]; word[0] != '&' && word[0] != '!' {
			return strings.ContainsRune(":-?,[{", rune(before[len(before)-1]))
		}
		before = strings.TrimRight(before[:k], " \t")
	}
}

// findSecret finds the first secret-looking key in l (or anchor in
// anchors): where it starts and where its value starts.
func findSecret(l string, anchors map[string]bool) (key, value int, ok bool) {
	key, value = -1, -1
	for _, m := range keyToken.FindAllStringSubmatchIndex(l, -1) {
		name := l[m[2]:m[3]]
		if name[0] == '"' || name[0] == '\'' {
			name = name[1 : len(name)-1]
		}
		if !secretName(name) || pathName(name) && plainPath(l[m[1]:]) {
			continue
		}
		key, value = m[2], m[1]
		break
	}
	for _, m := range anchorToken.FindAllStringSubmatchIndex(l, -1) {
		if anchors[l[m[2]:m[3]]] {
			if key < 0 || m[2]-1 < key {
				key, value = m[2]-1, m[3]
			}
			break
		}
	}
	return key, value, key >= 0
}

// plainPath reports whether the text after a path-named key is a value
// that ends on its line and is no collection or block: a path.
func plainPath(rest string) bool {
	rest = strings.TrimSpace(rest)
	return rest != "" && !strings.ContainsRune("{[|>&!*\"'#", rune(rest[0]))
}

// emptyValue reports whether the text after a key holds no value on its
// line (only anchors, tags, a block scalar indicator or a comment): the
// value is on the next lines.
func emptyValue(rest string) bool {
	if i := strings.IndexAny(rest, "#"); i >= 0 && (i == 0 || rest[i-1] == ' ' || rest[i-1] == '\t') {
		rest = rest[:i]
	}
	for _, f := range strings.Fields(rest) {
		switch {
		case f[0] == '&' || f[0] == '!':
		case (f[0] == '|' || f[0] == '>') && strings.Trim(f[1:], "+-0123456789") == "":
		default:
			return false
		}
	}
	return true
}

// indent is the column where a line's content starts, past any block
// sequence and mapping-key indicators ("- ", "? "): where a key on it is
// nested.
func indent(l string) int {
	i := 0
	for {
		for i < len(l) && (l[i] == ' ' || l[i] == '\t') {
			i++
		}
		if i+1 < len(l) && (l[i] == '-' || l[i] == '?') && (l[i+1] == ' ' || l[i+1] == '\t') {
			i++
			continue
		}
		return i
	}
}

// leading is the column of a line's first non-blank character.
func leading(l string) int {
	return len(l) - len(strings.TrimLeft(l, " \t"))
}

// commentBody returns the text of a whole-line comment after its '#'s and
// where that text starts, or ok false for a line that is not one.
func commentBody(l string) (body string, at int, ok bool) {
	t := strings.TrimLeft(l, " \t")
	if !strings.HasPrefix(t, "#") {
		return "", 0, false
	}
	at = len(l) - len(strings.TrimLeft(t, "#"))
	return l[at:], at, true
}

// contentStart is where a line's content starts: past its indentation
// and, for a whole-line comment, past the '#'s and the blanks after them.
func contentStart(l string) int {
	if body, at, ok := commentBody(l); ok {
		return at + leading(body)
	}
	return leading(l)
}

// redactPass redacts the lines once, with the anchors known secret so
// far; it returns the redacted lines and the aliases their redacted values
// refer to. Every line is looked at, hidden or not: a key in a line that
// goes on one value may start a value of its own that goes on further.
func redactPass(lines []string, lex []lexState, anchors map[string]bool) (out, aliases []string) {
	// from[j] is where line j is hidden from (-1: nowhere); a later hide
	// may hide more of a line, never less.
	from := make([]int, len(lines))
	goesOn := make([]bool, len(lines))
	for j := range from {
		from[j] = -1
	}
	hide := func(j, col int, cont bool) {
		if from[j] < 0 || col < from[j] {
			aliases = appendAliases(aliases, lines[j][col:])
			from[j], goesOn[j] = col, cont
		}
	}
	// Lines after a key up to covered are hidden (or blank) already, by
	// the values of keys before it: a key there looks on from covered,
	// which keeps a file of nested secrets linear.
	covered := -1
	// text[k] and comments[k] count the lines before k with text, and the
	// whole-line comments with text: whether a key's value is on lines it
	// looks past.
	text, comments := make([]int, len(lines)+1), make([]int, len(lines)+1)
	for k, l := range lines {
		text[k+1], comments[k+1] = text[k], comments[k]
		if strings.TrimSpace(l) != "" {
			text[k+1]++
		}
		if body, _, ok := commentBody(l); ok && strings.TrimSpace(body) != "" {
			comments[k+1]++
		}
	}
	for i, l := range lines {
		if pem := strings.Index(l, "-----BEGIN"); pem >= 0 && strings.Contains(l[pem:], "PRIVATE KEY-----") {
			// A private key, whatever its key: hidden to its END line.
			hide(i, pem, false)
			for j := i + 1; j < len(lines) && !strings.Contains(l[pem:], "-----END"); j++ {
				hide(j, contentStart(lines[j]), true)
				if strings.Contains(lines[j], "-----END") {
					break
				}
			}
		}
		key, value, ok := findSecret(l, anchors)
		if !ok {
			continue
		}
		hide(i, value, false)
		// The value may go on below: lines indented deeper than the key
		// (or its line, if less), a block sequence at the key's column,
		// the first line after a key with nothing after it, and in code
		// any line that starts inside a quote or inside a flow collection
		// that was open at the key. A key in a whole-line comment goes on
		// in the comment lines below; after code, on no line.
		body, at := l, 0
		view := func(j int) (string, int, bool) { return lines[j], 0, true }
		inComment := lex[i].commentAt >= 0 && key > lex[i].commentAt
		if inComment {
			var whole bool
			if body, at, whole = commentBody(l); !whole {
				continue
			}
			view = func(j int) (string, int, bool) { return commentBody(lines[j]) }
		}
		col := min(indent(body), key-at)
		depth := max(lexLine(l[:key], lex[i]).depth, 1)
		next := emptyValue(l[value:])
		j := i + 1
		if j <= covered {
			seen := text
			if inComment {
				seen = comments
			}
			next = next && seen[covered+1] == seen[j]
			j = covered + 1
		}
		for ; j < len(lines); j++ {
			v, at, ok := view(j)
			if !ok {
				break
			}
			if strings.TrimSpace(v) == "" {
				continue
			}
			n := leading(v)
			more := next || n > col || n == col && strings.HasPrefix(v[n:], "-")
			if !inComment {
				more = more || lex[j].quote != 0 || lex[j].depth >= depth
			}
			if !more {
				break
			}
			next = false
			hide(j, at+n, true)
		}
		if i > covered {
			covered = j - 1
		} else {
			covered = max(covered, j-1)
		}
	}
	out = append([]string(nil), lines...)
	for j, col := range from {
		switch prefix := strings.TrimRight(lines[j][:max(col, 0)], " \t"); {
		case col < 0 || strings.TrimSpace(lines[j][col:]) == "":
		case prefix != "" && !goesOn[j]: // after a key: one blank
			out[j] = prefix + " " + Redacted
		default: // a line that goes on a value keeps its indentation
			out[j] = lines[j][:col] + Redacted
		}
	}
	return out, aliases
}

func appendAliases(aliases []string, s string) []string {
	for _, m := range aliasToken.FindAllStringSubmatch(s, -1) {
		aliases = append(aliases, m[1])
	}
	return aliases
}
