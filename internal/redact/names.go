package redact

import (
	"strings"
	"unicode"
)

// secretWords are the words of a key name that make its value secret,
// whatever else the name says: sasl_password, Password, privateKey,
// client-secret, bearer_token, credentials, key.
var secretWords = map[string]bool{
	"password": true, "passwords": true, "passwd": true, "pwd": true, "passphrase": true,
	"secret": true, "secrets": true, "token": true, "tokens": true,
	"credential": true, "credentials": true, "creds": true,
	"key": true, "keys": true, "privatekey": true, "apikey": true,
	"authorization": true, "bearer": true, "cookie": true, "cookies": true,
	"jaas": true, "htpasswd": true,
}

// secretParts are looked for in the name with its separators removed, for
// names whose words run together (saslpassword, clientsecret,
// basic_auth_users: user names mapped to password hashes).
var secretParts = []string{"password", "passwd", "passphrase", "secret", "token", "credential",
	"privatekey", "apikey", "accesskey", "basicauth", "jaas"}

// pathWords end the names of keys that hold where a secret is, not the
// secret: password_file, key_file, credentials_path.
var pathWords = map[string]bool{"file": true, "path": true, "dir": true, "filename": true}

// secretName reports whether a key of this name holds a secret: any of its
// words (split at '_', '-', '.', spaces, digits and camelCase, compared
// lower-case) is a secret word, or the words joined contain a secret part.
func secretName(name string) bool {
	ws := words(name)
	for _, w := range ws {
		if secretWords[w] {
			return true
		}
	}
	joined := strings.Join(ws, "")
	for _, p := range secretParts {
		if strings.Contains(joined, p) {
			return true
		}
	}
	return false
}

// pathName reports whether the name's last word says its value is a path
// (password_file). Such a key keeps a one-line scalar value only.
func pathName(name string) bool {
	ws := words(name)
	return len(ws) > 0 && pathWords[ws[len(ws)-1]]
}

// words splits a key name into lower-case words: at every rune that is
// neither a letter nor a digit, between letters and digits, and at
// camelCase boundaries (saslPassword, APIKey: api, key).
func words(name string) []string {
	var out []string
	rs := []rune(name)
	start := -1
	flush := func(end int) {
		if start >= 0 && end > start {
			out = append(out, strings.ToLower(string(rs[start:end])))
		}
		start = -1
	}
	for i, r := range rs {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			flush(i)
			continue
		}
		if start >= 0 {
			p := rs[i-1]
			switch {
			case unicode.IsDigit(p) != unicode.IsDigit(r),
				unicode.IsLower(p) && unicode.IsUpper(r),
				unicode.IsUpper(p) && unicode.IsUpper(r) && i+1 < len(rs) && unicode.IsLower(rs[i+1]):
				flush(i)
			}
		}
		if start < 0 {
			start = i
		}
	}
	flush(len(rs))
	return out
}
