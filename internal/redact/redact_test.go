package redact

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config hides every secret in every YAML shape a configuration can put
// it in, and keeps what is not secret. Each case names the secrets that
// must appear nowhere in the output and the text that must stay.
func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		secrets []string
		keep    []string
	}{
		{
			name:    "flow mapping, as sasl is often written",
			in:      "sasl: {mechanism: PLAIN, username: sluice, password: \"S3cr3t-flow\"}\n",
			secrets: []string{"S3cr3t-flow"},
			keep:    []string{"mechanism: PLAIN", "username: sluice", "password: <redacted>"},
		},
		{
			name: "block mapping, every spelling of a secret key",
			in: `sasl:
  mechanism: SCRAM-SHA-512
  Password: s-Password
  SASL_PASSWORD: s-SASL_PASSWORD
  sasl-password: s-dashed
  saslPassword: s-camel
  "password": s-dquoted
  'Secret': s-squoted
  client_secret: s-client
  bearer_token: s-bearer
  api-key: s-apikey
  privateKey: s-privkey
  private_key: s-private_key
  credentials: s-credentials
  passphrase: s-passphrase
  token: s-token
  key: s-key
  "my key": s-spaced
  passwd: s-passwd
  Sasl.Password: s-dotted
  password2: s-digit
  username: admin
`,
			secrets: []string{"s-Password", "s-SASL_PASSWORD", "s-dashed", "s-camel", "s-dquoted", "s-squoted", "s-client",
				"s-bearer", "s-apikey", "s-privkey", "s-private_key", "s-credentials", "s-passphrase", "s-token", "s-key",
				"s-spaced", "s-passwd", "s-dotted", "s-digit"},
			keep: []string{"mechanism: SCRAM-SHA-512", "username: admin", "saslPassword: <redacted>"},
		},
		{
			name:    "literal block scalar",
			in:      "password: |\n  S-literal-1\n  S-literal-2\n  # S-literal-3 is content, not a comment\nusername: u1\n",
			secrets: []string{"S-literal-1", "S-literal-2", "S-literal-3"},
			keep:    []string{"username: u1"},
		},
		{
			name:    "folded block scalar, chomping and indentation indicators",
			in:      "tls:\n  key: >2-\n     S-folded-1\n    S-folded-2\n  server_name: broker-1\n",
			secrets: []string{"S-folded-1", "S-folded-2"},
			keep:    []string{"server_name: broker-1"},
		},
		{
			name:    "multi-line plain and quoted scalars",
			in:      "token: S-plain-1\n  S-plain-2\nsecret: \"S-dq-1\n  S-dq-2\"\npassphrase: 'S-sq-1\n  S-sq-2'\nmode: shadow\n",
			secrets: []string{"S-plain-1", "S-plain-2", "S-dq-1", "S-dq-2", "S-sq-1", "S-sq-2"},
			keep:    []string{"mode: shadow"},
		},
		{
			name: "a mapping under a secret key, keys and all",
			in: `credentials:
  user: S-user
  pass: S-pass
  nested: {deep: [S-deep]}
  S-as-key: x
mode: enforce
`,
			secrets: []string{"S-user", "S-pass", "S-deep", "S-as-key"},
			keep:    []string{"credentials: <redacted>", "mode: enforce"},
		},
		{
			name:    "a sequence under a secret key, indented and compact",
			in:      "tokens:\n  - S-seq-1\n  - {a: S-seq-2}\nkeys:\n- S-seq-3\n- - S-seq-4\ninterfaces: [eth0]\n",
			secrets: []string{"S-seq-1", "S-seq-2", "S-seq-3", "S-seq-4"},
			keep:    []string{"interfaces: [eth0]"},
		},
		{
			name:    "deep in lists of mappings",
			in:      "a:\n  b:\n    - c: {d: [{password: S-deep-1}]}\n    - name: keep-me\n      token: [S-deep-2]\n",
			secrets: []string{"S-deep-1", "S-deep-2"},
			keep:    []string{"name: keep-me"},
		},
		{
			name:    "an alias under a secret key: the anchor's value goes where it is defined",
			in:      "defaults: &pw S-anchored\nsasl: {password: *pw, username: bob}\nother: *pw\n",
			secrets: []string{"S-anchored"},
			keep:    []string{"username: bob"},
		},
		{
			name:    "an alias of a mapping, and aliases inside it",
			in:      "inner: &i {v: S-inner}\ncommon: &c {user: S-user2, x: *i}\ncredentials: *c\nmode: shadow\n",
			secrets: []string{"S-inner", "S-user2"},
			keep:    []string{"mode: shadow"},
		},
		{
			name:    "an anchor inside a secret, aliased elsewhere",
			in:      "password: &p S-inside\nother: *p\nsecret: {a: &q S-inside-2}\nelse: [*q]\n",
			secrets: []string{"S-inside", "S-inside-2"},
		},
		{
			name: "merge keys: a secret merged in, and merged into a secret",
			in: `base: &base {password: S-merge-1, mechanism: PLAIN}
more: &more {x: S-merge-2}
sasl:
  <<: *base
  username: merged-user
token:
  <<: [*more]
  y: 1
`,
			secrets: []string{"S-merge-1", "S-merge-2"},
			keep:    []string{"mechanism: PLAIN", "username: merged-user", "<<: *base"},
		},
		{
			name:    "an alias as the key",
			in:      "names: [&k password]\nsasl: {*k : S-alias-key}\n",
			secrets: []string{"S-alias-key"},
		},
		{
			name:    "a complex key",
			in:      "? [password]\n: S-complex\n? {token: S-in-key}\n: v\n",
			secrets: []string{"S-complex", "S-in-key"},
		},
		{
			name: "comments: on the secret's line, commented out, in a block",
			in: `# operator's comment
sasl:
  password: S-c1 # S-c2 was the old one
  # password: S-c3
  #token: |
  #  S-c4
  #  S-c5
  username: u
# sasl: {password: S-c6, user: x}
# the old password: S-c7
mode: shadow # keep this comment
tokens: # S-c8 is the one
  - x
`,
			secrets: []string{"S-c1", "S-c2", "S-c3", "S-c4", "S-c5", "S-c6", "S-c7", "S-c8"},
			keep:    []string{"# operator's comment", "username: u", "# keep this comment"},
		},
		{
			name:    "a private key under any name",
			in:      "tls:\n  cert: |\n    -----BEGIN RSA PRIVATE KEY-----\n    S-pem\n    -----END RSA PRIVATE KEY-----\n  ca_file: /etc/ca.pem\n",
			secrets: []string{"S-pem"},
			keep:    []string{"cert: <redacted>", "ca_file: /etc/ca.pem"},
		},
		{
			name: "paths to secrets stay, unless they hold more than a path",
			in: `sasl: {password_file: /etc/sluice/sasl-password}
tls: {key_file: /etc/sluice/key.pem, cert_file: /etc/sluice/cert.pem}
metrics: {web_config_file: /etc/sluice/web.yml}
other:
  password_file: {inline: S-path-map}
  token_path: |
    S-path-block
`,
			secrets: []string{"S-path-map", "S-path-block"},
			keep:    []string{"password_file: /etc/sluice/sasl-password", "key_file: /etc/sluice/key.pem", "web_config_file: /etc/sluice/web.yml"},
		},
		{
			name:    "unset secrets say so",
			in:      "sasl:\n  password: \"\"\n  token: ~\n  secret:\n",
			keep:    []string{`password: ""`, "token: ~", "secret:"},
			secrets: []string{Redacted},
		},
		{
			name:    "numbers, booleans, tags",
			in:      "token: 918273645\nsecret: true\npassword: !!binary UzNjcmV0\nkey: !vault S-tagged\n",
			secrets: []string{"918273645", "true", "UzNjcmV0", "S-tagged", "vault"},
		},
		{
			name:    "every document of a stream",
			in:      "mode: shadow\n---\npassword: S-doc-2\n---\n- {token: S-doc-3}\n",
			secrets: []string{"S-doc-2", "S-doc-3"},
			keep:    []string{"mode: shadow"},
		},
		{
			name:    "secrets inside other values: JAAS, a URL",
			in:      "jaas: 'org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\" password=\"S-jaas\";'\nurl: https://u:S-url@example.com/\n",
			secrets: []string{"S-jaas", "S-url"},
			keep:    []string{"https://u:<redacted>@example.com/"},
		},
		{
			name: "a Prometheus web configuration",
			in: `tls_server_config:
  cert_file: /etc/sluice/web.crt
  key_file: /etc/sluice/web.key
basic_auth_users:
  prometheus: $2y$10$S-bcrypt-hash
http_server_config:
  headers: {X-Frame-Options: deny, Authorization: S-header}
`,
			secrets: []string{"S-bcrypt-hash", "prometheus", "S-header"},
			keep:    []string{"cert_file: /etc/sluice/web.crt", "key_file: /etc/sluice/web.key", "X-Frame-Options: deny"},
		},
		{
			name:    "an environment file, all one plain scalar to YAML",
			in:      "SASL_PASSWORD=S-env\nKAFKA_USER=bob\n",
			secrets: []string{"S-env"},
			keep:    []string{"SASL_PASSWORD="},
		},
		{
			name:    "comments only",
			in:      "# password: S-only\n# mode: shadow\n",
			secrets: []string{"S-only"},
			keep:    []string{"# mode: shadow"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Config([]byte(tc.in))
			if err != nil {
				t.Fatalf("Config: %v", err)
			}
			check(t, tc.in, string(out), tc.secrets, tc.keep)
			var n yaml.Node
			if err := yaml.Unmarshal(out, &n); err != nil {
				t.Errorf("the output does not parse: %v\n%s", err, out)
			}
		})
	}
}

// A file that does not parse is redacted line by line, and says so; the
// error names the line, never the file's text.
func TestConfigNotYAML(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		secrets []string
		keep    []string
	}{
		{
			name:    "a tab",
			in:      "sasl:\n\tpassword: S-tab\n  username: u\nmode: shadow\n",
			secrets: []string{"S-tab"},
			keep:    []string{"mode: shadow"},
		},
		{
			name:    "a block scalar after a broken line",
			in:      "foo: bar: baz\npassword: |\n  S-block-1\n  S-block-2\nusername: kept-user\n",
			secrets: []string{"S-block-1", "S-block-2"},
			keep:    []string{"foo: bar: baz", "username: kept-user"},
		},
		{
			name:    "nested mappings and a compact sequence",
			in:      "@broken\ncredentials:\n  user: S-n1\n  more:\n    - S-n2\ntokens:\n- S-n3\n- S-n4\nmode: shadow\n",
			secrets: []string{"S-n1", "S-n2", "S-n3", "S-n4"},
			keep:    []string{"mode: shadow"},
		},
		{
			name:    "flow style, on one line and over several",
			in:      "\tx: 1\nsasl: {password: S-f1, user: u}\nother: {token:\n   S-f2, a: b,\n c: S-f3}\nmode: shadow\n",
			secrets: []string{"S-f1", "S-f2", "S-f3"},
			keep:    []string{"mode: shadow"},
		},
		{
			name:    "a flow collection going on at the key's column",
			in:      "\tbad\ntoken: [a,\nS-f5,\n S-f6]\nmode: shadow\n",
			secrets: []string{"S-f5", "S-f6"},
			keep:    []string{"mode: shadow"},
		},
		{
			name:    "the value on the line after its key, at the key's column",
			in:      "\tbad\npassword:\nS-next\nmode: shadow\n",
			secrets: []string{"S-next"},
			keep:    []string{"mode: shadow"},
		},
		{
			name:    "anchors a redacted anchor refers to",
			in:      "\tbad\nd1: &d1 S-chain-1\nd2: &d2 [*d1, S-chain-2]\npassword: *d2\nmode: shadow\n",
			secrets: []string{"S-chain-1", "S-chain-2"},
			keep:    []string{"mode: shadow"},
		},
		{
			name:    "quoted keys and values over several lines",
			in:      "]\n\"sasl-password\": \"S-q1\nS-q2\"\n'Secret': 'S-q3'\nmode: shadow\n",
			secrets: []string{"S-q1", "S-q2", "S-q3"},
			keep:    []string{"mode: shadow"},
		},
		{
			name:    "anchors a secret refers to",
			in:      "\tbroken\ndefs: &d S-a1\nblock: &b\n  v: S-a2\npassword: *d\ntoken: {<<: *b}\nplain: &p keep-anchor\nmode: *p\n",
			secrets: []string{"S-a1", "S-a2"},
			keep:    []string{"plain: &p keep-anchor"},
		},
		{
			name:    "a key in a line that goes on another value starts its own",
			in:      "x: 'unclosed\npassword: a\n# 'secret': |\n#   S-inner\nmode: shadow\n",
			secrets: []string{"S-inner"},
			keep:    []string{"mode: shadow"},
		},
		{
			name:    "a secret key in a secret's value, then a line that stays",
			in:      "sasl:\n\tpassword: S-outer\n  token: |\n    S-block\n  # secret:\n  #   S-comment\nmode: shadow\n",
			secrets: []string{"S-outer", "S-block", "S-comment"},
			keep:    []string{"mode: shadow"},
		},
		{
			name:    "an unknown anchor: the parser's message would quote it",
			in:      "password: *S-anchor-name\n",
			secrets: []string{"S-anchor-name"},
		},
		{
			name:    "comments and a private key",
			in:      "\tbad\n# token: S-cm1\nx: 1 # password: S-cm2\ny: |\n  -----BEGIN PRIVATE KEY-----\n  S-pem\n  -----END PRIVATE KEY-----\nmode: shadow\n",
			secrets: []string{"S-cm1", "S-cm2", "S-pem"},
			keep:    []string{"x: 1", "mode: shadow"},
		},
		{
			name:    "an environment file, with a tab",
			in:      "\tSASL_PASSWORD=S-env\nKAFKA_USER=bob\n",
			secrets: []string{"S-env"},
			keep:    []string{"KAFKA_USER=bob"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Config([]byte(tc.in))
			if !errors.Is(err, ErrNotYAML) {
				t.Fatalf("Config: %v, want ErrNotYAML", err)
			}
			for _, s := range tc.secrets {
				if strings.Contains(err.Error(), s) {
					t.Errorf("the error %q holds %q", err, s)
				}
			}
			if !strings.HasPrefix(string(out), "# sluice bugreport: this file did not parse as YAML") {
				t.Errorf("the output does not say the file did not parse:\n%s", out)
			}
			check(t, tc.in, string(out), tc.secrets, tc.keep)
		})
	}
}

// A file that does not parse costs time linear in its lines, even when
// every line is in the value of every key before it (an unclosed bracket
// at the top): each key looks on from where the keys before it stopped.
func TestConfigNotYAMLLinear(t *testing.T) {
	in := "a: [\n" + strings.Repeat("  password: x\n", 20000) + "mode: shadow\n"
	start := time.Now()
	out, err := Config([]byte(in))
	if !errors.Is(err, ErrNotYAML) || strings.Contains(string(out), "password: x") {
		t.Fatalf("Config: %v\n%.200s", err, out)
	}
	// Quadratic, it took minutes; linear, milliseconds.
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("20000 lines took %v", d)
	}
}

func check(t *testing.T, in, out string, secrets, keep []string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("%q is in the output\n--- in:\n%s--- out:\n%s", s, in, out)
		}
	}
	for _, s := range keep {
		if !strings.Contains(out, s) {
			t.Errorf("%q is not in the output\n--- in:\n%s--- out:\n%s", s, in, out)
		}
	}
}

// The shipped configuration holds no secret: its redacted copy has the
// same values, so no key sluice has today is taken for a secret.
func TestConfigShipped(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Config(raw)
	if err != nil {
		t.Fatal(err)
	}
	var before, after any
	if err := yaml.Unmarshal(raw, &before); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(out, &after); err != nil {
		t.Fatalf("the output does not parse: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(before, after) {
		t.Errorf("redacting the shipped configuration changed a value:\n%s", out)
	}
	// The same with its secrets set.
	set := strings.Replace(string(raw), `  password: ""`, `  password: "S-shipped"`, 1)
	set = strings.Replace(set, "  # web_config_file: /etc/sluice/web.yml", "  web_config_file: /etc/sluice/web.yml", 1)
	out, err = Config([]byte(set))
	if err != nil {
		t.Fatal(err)
	}
	check(t, set, string(out), []string{"S-shipped"}, []string{"web_config_file: /etc/sluice/web.yml", "password: <redacted>"})
}

func TestSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"password": true, "Password": true, "SASL_PASSWORD": true, "sasl-password": true, "saslPassword": true,
		"secret": true, "client_secret": true, "clientSecret": true, "token": true, "bearer_token": true, "accessToken": true,
		"key": true, "private_key": true, "privateKey": true, "PRIVATEKEY": true, "APIKey": true, "api-key": true,
		"credentials": true, "Credentials": true, "basic_auth_users": true, "passphrase": true, "sasl.jaas.config": true,
		"key2": true, "my key": true, "Authorization": true,
		// Paths are secret names too: pathName lets a one-line value stay.
		"password_file": true, "key_file": true,
		// Keys sluice has today, and others that are not secret.
		"mechanism": false, "username": false, "cert_file": false, "ca_file": false, "server_name": false,
		"web_config_file": false, "metrics_address": false, "max_entity_series": false, "socket": false,
		"pin_path": false, "keep_attached_on_exit": false, "producer_byte_rate": false, "monkey": false,
		"keyspace": false, "auth-service": false, "<default>": false, "bootstrap": false, "insecure_skip_verify": false,
	} {
		if got := secretName(name); got != want {
			t.Errorf("secretName(%q) = %v, want %v", name, got, want)
		}
	}
	for name, want := range map[string]bool{"password_file": true, "key_file": true, "token_path": true, "password": false, "file_password": false} {
		if got := pathName(name); got != want {
			t.Errorf("pathName(%q) = %v, want %v", name, got, want)
		}
	}
}
