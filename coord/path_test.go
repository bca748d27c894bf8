package coord

import (
	"errors"
	"testing"
)

func TestValidatePath(t *testing.T) {
	cases := []struct {
		name string
		path string
		ok   bool
	}{
		{"root", "/", true},
		{"one component", "/a", true},
		{"nested", "/brokers/ids/1", true},
		{"dots inside names", "/a.b/..c/d..", true},
		{"unicode", "/tópico", true},
		{"empty", "", false},
		{"relative", "a/b", false},
		{"trailing slash", "/a/", false},
		{"double slash", "/a//b", false},
		{"dot", "/a/./b", false},
		{"dot-dot", "/a/..", false},
		{"NUL", "/a\x00", false},
		{"control", "/a\x7f", false},
		{"invalid UTF-8", "/a\xff", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidatePath(tc.path)
			if tc.ok && err != nil {
				t.Fatalf("ValidatePath(%q) = %v", tc.path, err)
			}
			if !tc.ok && !errors.Is(err, ErrInvalidPath) {
				t.Fatalf("ValidatePath(%q) = %v, want ErrInvalidPath", tc.path, err)
			}
		})
	}
}

func TestValidateCreatePath(t *testing.T) {
	cases := []struct {
		name  string
		path  string
		flags CreateFlags
		ok    bool
	}{
		{"plain", "/a", 0, true},
		{"root", "/", 0, false},
		{"sequential trailing slash", "/a/", Sequential, true},
		{"plain trailing slash", "/a/", 0, false},
		{"sequential root slash", "/", Sequential, false},
		{"sequential double slash", "/a//", Sequential, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := validateCreatePath(tc.path, tc.flags)
			if (err == nil) != tc.ok {
				t.Fatalf("validateCreatePath(%q, %v) = %v, want ok=%v", tc.path, tc.flags, err, tc.ok)
			}
		})
	}
}

func TestPathParts(t *testing.T) {
	cases := []struct {
		path, parent, base string
	}{
		{"/a", "/", "a"},
		{"/a/b", "/a", "b"},
		{"/a/b/", "/a/b", ""},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			if got := parentPath(tc.path); got != tc.parent {
				t.Fatalf("parentPath(%q) = %q, want %q", tc.path, got, tc.parent)
			}
			if got := baseName(tc.path); got != tc.base {
				t.Fatalf("baseName(%q) = %q, want %q", tc.path, got, tc.base)
			}
		})
	}
	if got := JoinPath("/", "a"); got != "/a" {
		t.Fatalf("JoinPath(/, a) = %q", got)
	}
	if got := JoinPath("/a", "b"); got != "/a/b" {
		t.Fatalf("JoinPath(/a, b) = %q", got)
	}
}
