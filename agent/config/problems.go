package config

import (
	"errors"
	"strings"
)

// ErrInvalid wraps every configuration error; errors.As to *Problems lists them.
var ErrInvalid = errors.New("invalid configuration")

// Problem is one invalid key.
type Problem struct {
	Key     string // dotted path, e.g. entities.clients.core-group
	Message string
}

// Problems lists every problem found in a file, in key order.
type Problems []Problem

func (p Problems) Error() string {
	lines := make([]string, len(p))
	for i, pr := range p {
		lines[i] = pr.Key + ": " + pr.Message
	}
	return strings.Join(lines, "\n")
}

func (p Problems) Unwrap() error { return ErrInvalid }
