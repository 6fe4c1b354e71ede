package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/postgres"
)

// Open sizes the pool from Config.MaxConns, unless the URL sets
// pool_max_conns: the operator's word wins.
func TestOpenSizesThePool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.SchemaURL(t)
	want := ferry.Workload{ReceiveBatches: 2, Workers: 32}.Conns()
	for _, tc := range []struct {
		name, url string
		want      int32
	}{
		{"FromTheWorkload", url, int32(want)},
		{"TheURLWins", url + "&pool_max_conns=3", 3},
	} {
		s, err := postgres.Open(ctx, tc.url, &postgres.Config{MaxConns: want})
		if err != nil {
			t.Fatal(err)
		}
		got := s.Pool().Config().MaxConns
		s.Close()
		if got != tc.want {
			t.Errorf("%s: pool of %d, want %d", tc.name, got, tc.want)
		}
	}
}

// Open bounds each connection's startup by Config.ConnectTimeout, unless
// the URL sets connect_timeout: the operator's word wins.
func TestOpenBoundsTheConnect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.SchemaURL(t)
	for _, tc := range []struct {
		name, url string
		want      time.Duration
	}{
		{"FromTheConfig", url, 7 * time.Second},
		{"TheURLWins", url + "&connect_timeout=3", 3 * time.Second},
	} {
		s, err := postgres.Open(ctx, tc.url, &postgres.Config{ConnectTimeout: 7 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got := s.Pool().Config().ConnConfig.ConnectTimeout
		s.Close()
		if got != tc.want {
			t.Errorf("%s: connect timeout %s, want %s", tc.name, got, tc.want)
		}
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
