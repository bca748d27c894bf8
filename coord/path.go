package coord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ValidatePath reports whether p is a valid node path: "/" or '/' followed by
// non-empty components separated by single '/', none of them "." or "..", with no
// control or reserved characters (ZooKeeper's rules). The error wraps ErrInvalidPath.
func ValidatePath(p string) error {
	return validatePath(p, false)
}

// validateCreatePath is ValidatePath for Create: the root cannot be created, and a
// sequential create may end in '/'.
func validateCreatePath(p string, flags CreateFlags) error {
	if p == "/" {
		return fmt.Errorf("%w: the root exists and cannot be created", ErrInvalidPath)
	}
	return validatePath(p, flags&Sequential != 0)
}

// validateDeletePath is ValidatePath for Delete: the root cannot be deleted.
func validateDeletePath(p string) error {
	if p == "/" {
		return fmt.Errorf("%w: the root cannot be deleted", ErrInvalidPath)
	}
	return ValidatePath(p)
}

func validatePath(p string, trailingSlashOK bool) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: %q: %s", ErrInvalidPath, p, why)
	}
	if p == "" {
		return bad("empty")
	}
	if p[0] != '/' {
		return bad("not absolute")
	}
	if p == "/" {
		return nil
	}
	body := p[1:]
	if trailingSlashOK {
		body = strings.TrimSuffix(body, "/")
		if body == "" {
			return bad("sequential create needs a parent below the root or a name prefix")
		}
	}
	for comp := range strings.SplitSeq(body, "/") {
		switch comp {
		case "":
			return bad("empty component")
		case ".", "..":
			return bad("relative component")
		}
		if !utf8.ValidString(comp) {
			return bad("not UTF-8")
		}
		for _, r := range comp {
			switch {
			case r <= 0x1f, r >= 0x7f && r <= 0x9f, r >= 0xd800 && r <= 0xf8ff, r >= 0xfff0 && r <= 0xffff:
				return bad("control or reserved character")
			}
		}
	}
	return nil
}

// parentPath is the parent of a valid, non-root path.
func parentPath(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// baseName is the last component of a valid, non-root path.
func baseName(p string) string {
	return p[strings.LastIndexByte(p, '/')+1:]
}

// JoinPath joins a parent path and a child name: JoinPath("/", "a") is "/a",
// JoinPath("/a", "b") is "/a/b".
func JoinPath(parent, name string) string {
	if parent == "/" {
		return "/" + name
	}
	return parent + "/" + name
}

// EnsurePath creates p and every missing ancestor as empty persistent nodes. Nodes
// that already exist are left as they are, so it is safe to race with others doing
// the same.
func EnsurePath(ctx context.Context, c Coordinator, p string) error {
	if err := ValidatePath(p); err != nil {
		return err
	}
	if p == "/" {
		return nil
	}
	// Walk down from the root; a node that exists costs one round trip, which
	// only happens on the first call for a given path.
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		_, err := c.Create(ctx, p[:i], nil, 0)
		if err != nil && !errors.Is(err, ErrNodeExists) {
			return err
		}
	}
	return nil
}

// CreateAll is Create that first makes any missing ancestors of p as empty persistent
// nodes. It returns the created node's actual path. Like Create, it fails with
// ErrNodeExists if p itself exists.
func CreateAll(ctx context.Context, c Coordinator, p string, data []byte, flags CreateFlags) (string, error) {
	if err := validateCreatePath(p, flags); err != nil {
		return "", err
	}
	// A parent deleted between EnsurePath and Create sends us around again; more
	// than a few rounds means someone keeps deleting it, which is theirs to explain.
	const attempts = 3
	var err error
	for range attempts {
		var created string
		created, err = c.Create(ctx, p, data, flags)
		if !errors.Is(err, ErrNoParent) {
			return created, err
		}
		// parentPath("/a/b/") is "/a/b", as a sequential create there needs.
		if err := EnsurePath(ctx, c, parentPath(p)); err != nil {
			return "", err
		}
	}
	return "", err
}
