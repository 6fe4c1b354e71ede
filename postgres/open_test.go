package postgres_test

import (
	"context"
	"testing"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/postgres"
)

// Open sizes the pool from Config.MaxConns, unless the URL sets
// pool_max_conns: the operator's word wins.
func TestOpenSizesThePool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, schema := pgtest.Schema(t)
	url := pgtest.ConnString(schema)
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
