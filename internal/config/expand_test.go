package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// ${NAME} is expanded in every string value, durations and lists included,
// not only in the keys that usually hold secrets.
func TestParseExpandsEveryString(t *testing.T) {
	t.Parallel()
	raw := `
[store]
url = "sqlite:${DIR}/ferry.db"
[http]
listen = "127.0.0.1:${PORT}"
[[source]]
name = "${NAME}"
provider = "hmac"
secrets = ["${SECRET}"]
replay_window = "${WINDOW}"
[source.hmac]
header = "${HEADER}"
event_id_header = "X-Id"
[telemetry]
service_name = "ferry-${NAME}"
`
	c, err := Parse([]byte(raw), env(map[string]string{
		"DIR": "/var/lib/ferry", "PORT": "9090", "NAME": "acme", "SECRET": "s$cret", "WINDOW": "24h", "HEADER": "X-Sig",
	}))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Sources[0]
	for got, want := range map[string]string{
		c.Store.URL: "sqlite:/var/lib/ferry/ferry.db", c.HTTP.Listen: "127.0.0.1:9090", s.Name: "acme",
		s.Secrets[0]: "s$cret", s.HMAC.Header: "X-Sig", c.Telemetry.ServiceName: "ferry-acme",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if s.ReplayWindow.Duration != 24*time.Hour || s.Retention.Duration != 48*time.Hour {
		t.Errorf("replay_window %v, retention %v; want 24h and its default 48h", s.ReplayWindow.Duration, s.Retention.Duration)
	}

	_, err = Parse([]byte(good+"[source.catchup]\napi_key = \"k\"\ntypes = [\"${TYPE}\"]\n"), env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"}))
	wantInvalid(t, err, "source[0].catchup.types[0]: environment variable TYPE is not set", "export it", "")
	_, err = Parse([]byte(good+"[source.catchup]\napi_key = \"k\"\ntypes = [\"${TYPE}\"]\n"), env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x", "TYPE": ""}))
	wantInvalid(t, err, "source[0].catchup.types[0]: environment variable TYPE is empty", "give it a value", "")
	_, err = Parse([]byte(strings.Replace(good, `replay_window = "72h"`, `replay_window = "${WINDOW}"`, 1)), env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x", "WINDOW": "3 days"}))
	wantInvalid(t, err, `source[0].replay_window: ${WINDOW} does not expand to a duration`, `"72h"`, "")
	if strings.Contains(err.Error(), "3 days") {
		t.Errorf("error %q shows the variable's value", err)
	}
}

// expand reaches every string and duration of a Config: a key added later
// takes ${NAME} too.
func TestExpandReachesEveryField(t *testing.T) {
	t.Parallel()
	var c Config
	fill(reflect.ValueOf(&c).Elem())
	if errs := expand(reflect.ValueOf(&c).Elem(), "", env(map[string]string{"V": "v", "D": "1s"})); len(errs) > 0 {
		t.Fatal(errs)
	}
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				walk(v.Elem(), path)
			}
		case reflect.String:
			if v.String() != "v" {
				t.Errorf("%s = %q, want it expanded", path, v.String())
			}
		case reflect.Slice:
			for i := range v.Len() {
				walk(v.Index(i), path)
			}
		case reflect.Struct:
			if d, ok := v.Addr().Interface().(*Duration); ok {
				if d.Duration != time.Second {
					t.Errorf("%s = %v, want it expanded", path, d.Duration)
				}
				return
			}
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() { // not a key: set by code
					walk(v.Field(i), path+"."+v.Type().Field(i).Name)
				}
			}
		}
	}
	walk(reflect.ValueOf(&c).Elem(), "Config")
}

// fill writes "${V}" in every string under v and "${D}" in every duration,
// making one element of each list.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type().Elem().Kind() == reflect.Struct {
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem())
		}
	case reflect.String:
		v.SetString("${V}")
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Struct:
		if d, ok := v.Addr().Interface().(*Duration); ok {
			_ = d.UnmarshalText([]byte("${D}"))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	}
}

// A ${...} whose name is not a variable name is a mistyped reference,
// refused naming the key (never its text: it may sit in a secret); it was
// kept as literal text, so the secret was "${STRIPE-SECRET}" itself. A
// plain $NAME stays literal, as documented.
func TestParseRefusesAMalformedReference(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x", "STRIPE": "whsec_y"})
	for _, ref := range []string{"${1BAD}", "${STRIPE-SECRET}", "${}", "SEKRET${STRIPE SECRET}", "${STRIPE}${1BAD}"} {
		raw := strings.Replace(good, `secrets = ["${STRIPE_WEBHOOK_SECRET}"]`, `secrets = ["`+ref+`"]`, 1)
		_, err := Parse([]byte(raw), vars)
		wantInvalid(t, err, "source[0].secrets[0]: has a ${...} whose name is not a variable name", "like ${STRIPE_WEBHOOK_SECRET}", "SEKRET")
	}
	_, err := Parse([]byte(strings.Replace(good, `replay_window = "72h"`, `replay_window = "${72H}"`, 1)), vars)
	if err == nil {
		t.Error("replay_window = \"${72H}\" was accepted")
	}
	for _, literal := range []string{"whsec_$STRIPE", "whsec_a$b{c}", "whsec_${"} {
		raw := strings.Replace(good, `secrets = ["${STRIPE_WEBHOOK_SECRET}"]`, `secrets = ["`+literal+`"]`, 1)
		c, err := Parse([]byte(raw), vars)
		if err != nil {
			t.Errorf("secrets = [%q]: %v", literal, err)
		} else if c.Sources[0].Secrets[0] != literal {
			t.Errorf("secrets = [%q] read as %q, want it literal", literal, c.Sources[0].Secrets[0])
		}
	}
}
