package main

import "testing"

// Every pair of ingest sides runs in each order equally often, whatever
// -rounds says: a side that always ran first would be timed on a quieter
// (or busier) server than the one after it.
func TestIngestOrderIsBalanced(t *testing.T) {
	t.Parallel()
	for rounds := 1; rounds <= 5; rounds++ {
		for sides := 2; sides <= 3; sides++ {
			n := ingestRounds(rounds)
			if n < rounds || n%2 != 0 {
				t.Fatalf("ingestRounds(%d) = %d: want an even count of at least %d", rounds, n, rounds)
			}
			before := map[[2]int]int{} // {i, j}: rounds in which i ran before j
			first := map[int]int{}
			for r := range n {
				order := ingestOrder(r, sides)
				if len(order) != sides {
					t.Fatalf("ingestOrder(%d, %d) = %v: want each side once", r, sides, order)
				}
				first[order[0]]++
				for a := range order {
					for b := a + 1; b < len(order); b++ {
						before[[2]int{order[a], order[b]}]++
					}
				}
			}
			for i := range sides {
				for j := i + 1; j < sides; j++ {
					if before[[2]int{i, j}] != before[[2]int{j, i}] {
						t.Errorf("-rounds %d, %d sides: side %d ran before side %d in %d rounds, after it in %d", rounds, sides, i, j, before[[2]int{i, j}], before[[2]int{j, i}])
					}
				}
			}
			if first[0] != first[sides-1] {
				t.Errorf("-rounds %d, %d sides: Ferry (side 0) ran first %d times, the last side %d", rounds, sides, first[0], first[sides-1])
			}
		}
	}
}

// The bare receiver also runs with one connection per client, so that its
// best is not a pool its requests queue for.
func TestBarePoolsIncludeOnePerClient(t *testing.T) {
	t.Parallel()
	if got := barePools(&options{poolSize: 16, clients: 64}); len(got) != 2 || got[0] != 16 || got[1] != 64 {
		t.Errorf("barePools(pool 16, clients 64) = %v, want [16 64]", got)
	}
	if got := barePools(&options{poolSize: 64, clients: 64}); len(got) != 1 || got[0] != 64 {
		t.Errorf("barePools(pool 64, clients 64) = %v, want [64]", got)
	}
}

func TestSkipLogLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		skip bool
	}{
		{`{"level":"INFO","msg":"ferry: serving","listen":"127.0.0.1:1"}`, false},
		{`{"level":"INFO","msg":"ferry: webhook","outcome":"stored","status":200}`, true},
		{`{"level":"WARN","msg":"ferry: webhook","outcome":"unavailable","reason":"client_gone"}`, true},
		{`{"level":"WARN","msg":"ferry: webhook","outcome":"unavailable","reason":"store_timeout"}`, false},
		{`{"level":"ERROR","msg":"ferry: archive"}`, false},
		{`panic: boom`, false},
	} {
		if got := skipLogLine([]byte(tc.line)); got != tc.skip {
			t.Errorf("skipLogLine(%s) = %v, want %v", tc.line, got, tc.skip)
		}
	}
}
