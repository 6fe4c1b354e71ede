// Package typednil tells a nil that "v == nil" misses, so that a
// constructor refuses it at once instead of a goroutine panicking later.
package typednil

import "reflect"

// Is reports whether v, a value of interface I, is nil however it is
// wrapped: a nil interface, a nil pointer, func, map or channel inside one,
// or a struct whose embedded I is itself nil (a decorator around a nil
// verifier). Each of these passes "v == nil" and panics at first use.
func Is[I any](v I) bool {
	return nilValue(reflect.ValueOf(&v).Elem(), reflect.TypeFor[I](), 0)
}

func nilValue(rv reflect.Value, iface reflect.Type, depth int) bool {
	if depth > 8 { // a cycle of embedded pointers; give up, not nil
		return false
	}
	switch rv.Kind() {
	case reflect.Interface, reflect.Pointer:
		if rv.IsNil() {
			return true
		}
		return nilValue(rv.Elem(), iface, depth+1)
	case reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.UnsafePointer:
		return rv.IsNil()
	case reflect.Struct:
		for i := range rv.NumField() {
			f := rv.Type().Field(i)
			if f.Anonymous && f.Type.Implements(iface) && nilValue(rv.Field(i), iface, depth+1) {
				return true
			}
		}
	}
	return false
}
