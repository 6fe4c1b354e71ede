package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
)

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// anyRef matches what reads as a reference, ${ to the next }; one that
// envRef does not match whole (${1BAD}, ${STRIPE-SECRET}) is a mistyped
// name, refused rather than kept as literal text: a secret would be
// "${STRIPE-SECRET}" itself and every signature would fail.
var (
	anyRef   = regexp.MustCompile(`\$\{[^}]*\}`)
	wholeRef = regexp.MustCompile(`^` + envRef.String() + `$`)
	// bareRef is a whole value that looks like $NAME, which is not read.
	bareRef = regexp.MustCompile(`^\$[A-Za-z_][A-Za-z0-9_]*$`)
)

// expand replaces ${NAME} in every string value under v: each string and
// []string field, and each duration written with a reference. key is v's
// key as errors name it ("source[0].forward.secret"); an error names the
// variable, never a value.
func expand(v reflect.Value, key string, lookup func(string) (string, bool)) []error {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			return expand(v.Elem(), key, lookup)
		}
	case reflect.String:
		s, err := expandEnv(v.String(), lookup)
		if err != nil {
			return []error{fmt.Errorf("%s: %w", key, err)}
		}
		v.SetString(s)
	case reflect.Slice:
		var errs []error
		for i := range v.Len() {
			errs = append(errs, expand(v.Index(i), fmt.Sprintf("%s[%d]", key, i), lookup)...)
		}
		return errs
	case reflect.Struct:
		if d, ok := v.Addr().Interface().(*Duration); ok {
			return d.expand(key, lookup)
		}
		var errs []error
		for i := range v.NumField() {
			name := tomlName(v.Type().Field(i))
			if name == "" || name == "-" {
				continue
			}
			if key != "" {
				name = key + "." + name
			}
			errs = append(errs, expand(v.Field(i), name, lookup)...)
		}
		return errs
	}
	return nil
}

// expandEnv replaces ${NAME} (only that form, so a secret may hold a "$",
// as in "$NAME"), and refuses a ${...} around anything else.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	for _, ref := range anyRef.FindAllString(s, -1) {
		if !wholeRef.MatchString(ref) {
			// Not echoed: the text around it may be a secret.
			return "", fmt.Errorf("has a ${...} whose name is not a variable name: use letters, digits and _, not starting with a digit, like ${STRIPE_WEBHOOK_SECRET} (only ${NAME} is read from the environment)")
		}
	}
	var missing, empty []string
	out := envRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := ref[2 : len(ref)-1]
		v, ok := lookup(name)
		switch {
		case !ok:
			missing = append(missing, name)
		case v == "":
			empty = append(empty, name)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("environment variable %s is not set: export it before starting ferry", strings.Join(missing, ", "))
	}
	if len(empty) > 0 {
		// Set but empty is a different mistake: a file or secret store
		// that gave nothing.
		return "", fmt.Errorf("environment variable %s is empty: give it a value before starting ferry", strings.Join(empty, ", "))
	}
	return out, nil
}
