package config

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/provider"
)

// writtenZero is a key the file sets to its type's zero value (0, "0s",
// "") and the field it decoded into.
type writtenZero struct {
	key   string // as errors name it: "source[0] (stripe).max_attempts"
	path  string // as the file spells it: "source.max_attempts"
	field reflect.Value
}

// laterDefaults are the keys whose zero is made a default after Parse (by
// ferry.Config, the provider, or per source), by path, with that default.
var laterDefaults = map[string]string{
	"worker.workers":        fmt.Sprint(ferry.DefaultWorkers),
	"worker.poll_interval":  ferry.DefaultPollInterval.String(),
	"worker.retry_base":     ferry.DefaultRetryBase.String(),
	"worker.retry_cap":      ferry.DefaultRetryCap.String(),
	"source.tolerance":      provider.DefaultTolerance.String(),
	"alerts.at_risk_margin": "the source's replay_window / 6",
}

// zeroMeansDefault is the error of each key in zeros that stands for a
// default: one applyDefaults has since replaced, or one of laterDefaults.
// A written 0 that silently means the default (shutdown_grace = "0s"
// waiting 10s, max_attempts = 0 allowing 25) is a mistake the file's reader
// cannot see. A zero that stays, as the default (shutdown_delay) or as off
// (a catch-up interval of "0", sampling_ratio = 0), is kept.
func zeroMeansDefault(zeros []writtenZero) []error {
	var errs []error
	for _, z := range zeros {
		def, later := laterDefaults[z.path]
		if !later {
			if zeroValue(z.field) {
				continue
			}
			def = shown(z.field)
		}
		errs = append(errs, fmt.Errorf("%s: is written as zero, which means the default, %s: leave the key out for it, or write the value you want", z.key, def))
	}
	return errs
}

// writtenZeros lists the keys of md whose value in c is zero, before
// defaults are applied.
func writtenZeros(md toml.MetaData, c *Config) []writtenZero {
	var out []writtenZero
	source := -1 // the [[source]] table the keys belong to
	for _, k := range md.Keys() {
		if t := md.Type(k...); t == "Hash" || t == "ArrayHash" {
			if len(k) == 1 && k[0] == "source" {
				source++
			}
			continue
		}
		v, key := reflect.ValueOf(c).Elem(), ""
		for _, name := range k {
			if v.Kind() == reflect.Pointer && !v.IsNil() {
				v = v.Elem()
			}
			if v.Kind() != reflect.Struct {
				v = reflect.Value{}
				break
			}
			v = fieldByKey(v, name)
			key = strings.TrimPrefix(key+"."+name, ".")
			if v.Kind() == reflect.Slice && name == "source" && source >= 0 && source < v.Len() {
				v, key = v.Index(source), SourceKey(source, c.Sources[source].Name)
			}
		}
		if v.IsValid() && zeroValue(v) {
			out = append(out, writtenZero{key, k.String(), v})
		}
	}
	return out
}

// fieldByKey is v's field whose toml tag names key, or the zero Value.
func fieldByKey(v reflect.Value, key string) reflect.Value {
	if field, ok := tomlField(v.Type(), key); ok {
		return v.FieldByIndex(field.Index)
	}
	return reflect.Value{}
}

// zeroValue reports whether v holds its type's zero: a Duration of 0
// whatever it was written as, a set pointer to a zero.
func zeroValue(v reflect.Value) bool {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return false
		}
		v = v.Elem()
	}
	if d, ok := v.Addr().Interface().(*Duration); ok {
		return d.Duration == 0
	}
	return v.IsZero()
}

// shown is v as an error names it: a duration as Go writes it, text quoted.
func shown(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if d, ok := v.Addr().Interface().(*Duration); ok {
		return d.Duration.String()
	}
	if v.Kind() == reflect.String {
		return fmt.Sprintf("%q", v.String())
	}
	return fmt.Sprint(v.Interface())
}
