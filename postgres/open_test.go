package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/postgres"
)

// Open sizes the pool from Config.MaxConns and bounds each connection's
// startup by Config.ConnectTimeout, unless the URL sets pool_max_conns or
// connect_timeout: the operator's word wins.
func TestOpenTakesPoolSettingsUnlessTheURLSetsThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.SchemaURL(t)
	conns := ferry.Workload{ReceiveBatches: 2, Workers: 32}.Conns()
	config := &postgres.Config{MaxConns: conns, ConnectTimeout: 7 * time.Second}
	for _, tc := range []struct {
		name, url string
		conns     int32
		timeout   time.Duration
	}{
		{"FromTheConfig", url, int32(conns), 7 * time.Second},
		{"TheURLWins", url + "&pool_max_conns=3&connect_timeout=3", 3, 3 * time.Second},
		{"TheURLsNoBoundWins", url + "&connect_timeout=0", int32(conns), 0},
	} {
		s, err := postgres.Open(ctx, tc.url, config)
		if err != nil {
			t.Fatal(err)
		}
		got := s.Pool().Config()
		s.Close()
		if got.MaxConns != tc.conns || got.ConnConfig.ConnectTimeout != tc.timeout {
			t.Errorf("%s: pool of %d, connect timeout %s; want %d, %s", tc.name, got.MaxConns, got.ConnConfig.ConnectTimeout, tc.conns, tc.timeout)
		}
	}
}

// PGCONNECT_TIMEOUT is the operator's word too: Config.ConnectTimeout
// applies only where neither it nor the URL sets one. Not parallel:
// t.Setenv.
func TestOpenKeepsPGCONNECT_TIMEOUT(t *testing.T) {
	url := pgtest.SchemaURL(t)
	t.Setenv("PGCONNECT_TIMEOUT", "3")
	s, err := postgres.Open(context.Background(), url, &postgres.Config{ConnectTimeout: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Pool().Config().ConnConfig.ConnectTimeout; got != 3*time.Second {
		t.Errorf("connect timeout %s with PGCONNECT_TIMEOUT=3, want 3s", got)
	}
}

// A URL may turn synchronous_commit off for Ferry's sessions: a receipt
// would be answered 2xx before its commit is on disk. Open refuses it, and
// keeps every setting that flushes locally.
func TestOpenRefusesWhatIsNotDurable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.SchemaURL(t)
	for _, extra := range []string{"&synchronous_commit=off", "&options=-c%20synchronous_commit%3Doff"} {
		s, err := postgres.Open(ctx, url+extra, nil)
		if !errors.Is(err, ferry.ErrNotDurable) || !strings.Contains(err.Error(), "synchronous_commit is off") {
			t.Errorf("Open(…%s) = %v, want ErrNotDurable", extra, err)
		}
		if err == nil {
			s.Close()
		}
	}
	for _, extra := range []string{"", "&synchronous_commit=local", "&synchronous_commit=remote_apply"} {
		s, err := postgres.Open(ctx, url+extra, nil)
		if err != nil {
			t.Errorf("Open(…%s) = %v, want a store", extra, err)
			continue
		}
		s.Close()
	}
}

// A login the server refuses (a role or database it does not have, a wrong
// password) is ErrMisconfigured, naming the user, the database and the
// fix: trying again changes nothing, so ferry exits 2 naming store.url.
// A refusal that trying again may get past is not.
func TestOpenNamesARefusedLogin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	noRole, noDB := *base, *base
	noRole.User = url.User("ferry_no_such_role")
	noDB.Path = "/ferry_no_such_database"
	// Of several hosts, another may be the one to reach: not a mistake.
	severalHosts := noRole
	severalHosts.Host = "127.0.0.1:1," + base.Host
	s, err := postgres.Open(ctx, severalHosts.String(), nil)
	if err == nil {
		s.Close()
		t.Fatal("Open with several hosts opened a store")
	}
	if errors.Is(err, ferry.ErrMisconfigured) {
		t.Errorf("Open(%s) = %v: a refusal by one of several hosts is not ErrMisconfigured", severalHosts.Redacted(), err)
	}
	// Without sslmode the driver tries TLS, then the same server without:
	// one host still.
	noRolePrefer := noRole
	query := noRolePrefer.Query()
	query.Del("sslmode")
	noRolePrefer.RawQuery = query.Encode()
	for _, tc := range []struct {
		url  *url.URL
		want []string
	}{
		{&noRole, []string{`user "ferry_no_such_role"`, "28000", "pg_hba.conf"}},
		{&noRolePrefer, []string{`user "ferry_no_such_role"`, "28000"}},
		{&noDB, []string{`database "ferry_no_such_database"`, "3D000", "create the database"}},
	} {
		s, err := postgres.Open(ctx, tc.url.String(), nil)
		if err == nil {
			s.Close()
			t.Fatalf("Open(%s) opened a store", tc.url.Redacted())
		}
		if !errors.Is(err, ferry.ErrMisconfigured) {
			t.Errorf("Open(%s) = %v, want ErrMisconfigured", tc.url.Redacted(), err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open(%s) = %v, want it to say %q", tc.url.Redacted(), err, w)
			}
		}
	}
}

// Only a refusal no retry can pass has a fix (and is ErrMisconfigured): an
// authentication server out of reach is 28000 too.
func TestLoginFixOnlyForPermanentRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code, msg string
		fixed     bool
	}{
		{"28P01", `password authentication failed for user "ferry"`, true},
		{"28000", `role "ferry" does not exist`, true},
		{"28000", `no pg_hba.conf entry for host "10.0.0.5", user "ferry", database "ferry", no encryption`, true},
		{"28000", `pg_hba.conf rejects connection for host "10.0.0.5", user "ferry", database "ferry"`, true},
		{"28000", `role "ferry" is not permitted to log in`, true},
		{"28000", `LDAP authentication failed for user "ferry"`, false},
		{"28000", `GSSAPI authentication failed for user "ferry"`, false},
		{"3D000", `database "ferry" does not exist`, true},
		{"42501", `permission denied for database "ferry"`, true},
		{"42501", `permission denied to set parameter "log_statement"`, true},
		{"42501", `permission denied for table ferry_event`, false},
		{"53300", `sorry, too many clients already`, false},
	} {
		if got := postgres.LoginFix(tc.code, tc.msg) != ""; got != tc.fixed {
			t.Errorf("%s %q: a fix %v, want %v", tc.code, tc.msg, got, tc.fixed)
		}
	}
}
