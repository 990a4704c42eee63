// Package redact removes secrets from a YAML configuration before it
// leaves the host (in `sluice bugreport`'s archive).
//
// The rule goes by key name, not by the keys sluice knows today, so keys
// added later are covered: a key is secret when one of its words
// (split at '_', '-', '.', blanks, digits and camelCase, compared
// lower-case) is password, passwd, pwd, passphrase, secret(s), token(s),
// credential(s), creds, key(s), privatekey, apikey, authorization, bearer,
// cookie(s), jaas or htpasswd, or when its words run together contain
// password, passwd, passphrase, secret, token, credential, privatekey,
// apikey, accesskey, basicauth or jaas (saslpassword, basic_auth_users).
// Whatever a secret key holds, at any depth, goes: a scalar, a sequence, a
// mapping (keys included), a block scalar, and what an alias or a merge
// key brings there. A key whose name ends in file, path, dir or filename
// (password_file, key_file) names where a secret is: its value stays when
// it is a one-line scalar, and goes when it is anything else.
package redact

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Redacted replaces every secret value.
const Redacted = "<redacted>"

// ErrNotYAML says the file did not parse as YAML and was redacted line by
// line.
var ErrNotYAML = errors.New("did not parse as YAML")

// Config returns the YAML file raw with every secret value replaced by
// Redacted. It parses every document in raw and walks the trees, with
// aliases resolved: a value under a secret key is replaced whole, and so
// is the anchored value an alias under a secret key refers to, wherever it
// is defined. Empty and null values stay, so the output still says a
// secret is unset. Comments, and the text of other scalars, are redacted
// line by line as below (a commented-out password, a JAAS line, a URL's
// password); comments on a secret key's line go. Layout is YAML's own, at
// two blanks an indentation.
//
// If raw does not parse (or its trees do not encode again), Config
// redacts it line by line: from each secret-looking key to the end of its
// line, and every line below that may go on its value (deeper indented,
// inside a quote or flow collection open there, the line after a key with
// nothing after it), and so on for the anchors such values refer to. The
// output then starts with a comment that says so, and the error wraps
// ErrNotYAML and names the line only: a parser's message can quote the
// file.
func Config(raw []byte) ([]byte, error) {
	docs, err := decode(raw)
	if err != nil {
		return lineByLine(raw, err)
	}
	if len(docs) == 0 { // nothing but comments, or nothing
		return []byte(redactText(string(raw))), nil
	}
	r := &redactor{secret: map[*yaml.Node]bool{}}
	for _, d := range docs {
		r.mark(d)
	}
	for _, d := range docs {
		r.redact(d)
	}
	out, err := encode(docs)
	if err != nil {
		return lineByLine(raw, err)
	}
	return out, nil
}

// decode parses every document in raw. The parser has panicked on odd
// input before; that is a parse error too.
func decode(raw []byte) (docs []*yaml.Node, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("yaml: %v", p)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var d yaml.Node
		if err := dec.Decode(&d); err == io.EOF {
			return docs, nil
		} else if err != nil {
			return nil, err
		}
		if len(d.Content) > 0 {
			docs = append(docs, &d)
		}
	}
}

func encode(docs []*yaml.Node) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("yaml: %v", p)
		}
	}()
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			return nil, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

var errLine = regexp.MustCompile(`line (\d+)`)

func lineByLine(raw []byte, cause error) ([]byte, error) {
	at := ""
	if m := errLine.FindStringSubmatch(cause.Error()); m != nil {
		at = " (line " + m[1] + ")"
	}
	header := "# sluice bugreport: this file did not parse as YAML" + at + ", so it is redacted line by line:\n" +
		"# every value of a secret-looking key, and every line that may go on such a value, is " + Redacted + "\n"
	return []byte(header + redactText(string(raw))), fmt.Errorf("%w%s; redacted line by line", ErrNotYAML, at)
}

// redactor holds the nodes whose every scalar is secret.
type redactor struct {
	secret map[*yaml.Node]bool
}

// mark walks every node once (an alias is not followed: its anchor is
// walked where it is defined) and marks secret the values of secret keys,
// and private keys (PEM) wherever they are.
func (r *redactor) mark(n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			r.mark(k)
			if secretKey(k, v) {
				r.taint(v)
			}
			r.mark(v)
		}
	case yaml.ScalarNode:
		if strings.Contains(n.Value, "PRIVATE KEY-----") {
			r.taint(n)
		}
	default:
		for _, c := range n.Content {
			r.mark(c)
		}
	}
}

// taint marks n and everything reachable from it secret: its subtree, and
// through aliases the anchored values they refer to (with theirs).
func (r *redactor) taint(n *yaml.Node) {
	if r.secret[n] {
		return
	}
	r.secret[n] = true
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		r.taint(n.Alias)
	}
	for _, c := range n.Content {
		r.taint(c)
	}
}

// hidden reports whether n goes: it is secret, or an alias of a secret.
func (r *redactor) hidden(n *yaml.Node) bool {
	return r.secret[n] || n.Kind == yaml.AliasNode && n.Alias != nil && r.secret[n.Alias]
}

// redact replaces the hidden nodes under n, and redacts the comments and
// scalars that stay line by line.
func (r *redactor) redact(n *yaml.Node) {
	n.HeadComment = redactText(n.HeadComment)
	n.LineComment = redactText(n.LineComment)
	n.FootComment = redactText(n.FootComment)
	switch n.Kind {
	case yaml.ScalarNode:
		n.Value = redactText(n.Value)
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if r.hidden(v) {
				n.Content[i+1] = replacement(v)
				if n.Content[i+1].Value == Redacted {
					// A comment on the key's line, or below its value, is
					// about the secret.
					k.LineComment, k.FootComment = "", ""
				}
			} else {
				r.redact(v)
			}
			if r.hidden(k) {
				n.Content[i] = replacement(k)
			} else {
				r.redact(k)
			}
			if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
				k.Tag = "" // else it is written "!!merge <<"
			}
		}
	default:
		for i, c := range n.Content {
			if r.hidden(c) {
				n.Content[i] = replacement(c)
			} else {
				r.redact(c)
			}
		}
	}
}

// replacement is what a hidden node becomes: itself without comments if it
// is an empty or null scalar (a secret not set), else Redacted.
func replacement(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.ScalarNode && n.Anchor == "" && (n.Tag == "!!str" && n.Value == "" || n.Tag == "!!null" && isNull(n.Value)) {
		return &yaml.Node{Kind: n.Kind, Style: n.Style, Tag: n.Tag, Value: n.Value}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: Redacted}
}

func isNull(s string) bool {
	switch s {
	case "", "~", "null", "Null", "NULL":
		return true
	}
	return false
}

// secretKey reports whether the value v of key k is secret: k's name is
// (an alias's anchor's, for an alias; any scalar in it, for a collection
// key), unless the name is a path's and v a one-line scalar.
func secretKey(k, v *yaml.Node) bool {
	if k.Kind == yaml.AliasNode && k.Alias != nil {
		k = k.Alias
	}
	if k.Kind != yaml.ScalarNode {
		return anyScalar(k, secretName, map[*yaml.Node]bool{})
	}
	if !secretName(k.Value) {
		return false
	}
	if v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	return !pathName(k.Value) || v.Kind != yaml.ScalarNode || strings.ContainsAny(v.Value, "\n\r")
}

func anyScalar(n *yaml.Node, f func(string) bool, seen map[*yaml.Node]bool) bool {
	if seen[n] {
		return false
	}
	seen[n] = true
	if n.Kind == yaml.ScalarNode {
		return f(n.Value)
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return anyScalar(n.Alias, f, seen)
	}
	for _, c := range n.Content {
		if anyScalar(c, f, seen) {
			return true
		}
	}
	return false
}
