package prometheus_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/prometheus"
)

// recorder is a Registerer that keeps what is registered, so a test can
// read every metric's name and labels without a store.
type recorder struct{ collectors []prom.Collector }

func (r *recorder) Register(c prom.Collector) error {
	r.collectors = append(r.collectors, c)
	return nil
}
func (r *recorder) MustRegister(cs ...prom.Collector) { r.collectors = append(r.collectors, cs...) }
func (r *recorder) Unregister(prom.Collector) bool    { return false }

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	selector   = regexp.MustCompile(`\b(ferry_[a-z_]+)(\{([^}]*)\})?`)
	matcher    = regexp.MustCompile(`([a-z_]+)\s*(?:=~|!~|!=|=)\s*"([^"]*)"`)
)

// Every metric and label docs/alerts.yml names is one the service exports,
// so the example rules cannot silently watch a series that never exists.
func TestAlertRulesNameExportedMetrics(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	prometheus.NewMetrics(rec, []string{"stripe"})
	prometheus.NewCatchupMetrics(rec, []string{"stripe"})
	rec.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{Sources: []string{"stripe"}}))
	labels := map[string][]string{} // metric name → its labels
	for _, c := range rec.collectors {
		ch := make(chan *prom.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			s := d.String()
			name := descName.FindStringSubmatch(s)[1]
			var ls []string
			if m := descLabels.FindStringSubmatch(s); m != nil && m[1] != "" {
				ls = strings.Split(m[1], ",")
			}
			labels[name] = ls
			if _, ok := c.(*prom.HistogramVec); ok {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					labels[name+suffix] = append(slices.Clone(ls), "le")
				}
			}
		}
	}
	raw, err := os.ReadFile("../docs/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	exprs := 0
	for _, line := range strings.Split(string(raw), "\n") {
		_, expr, ok := strings.Cut(line, "expr:")
		if !ok {
			continue
		}
		exprs++
		for _, sel := range selector.FindAllStringSubmatch(expr, -1) {
			name := sel[1]
			known, ok := labels[name]
			if !ok {
				t.Errorf("docs/alerts.yml names %s, which the service does not export", name)
				continue
			}
			for _, m := range matcher.FindAllStringSubmatch(sel[3], -1) {
				if !slices.Contains(known, m[1]) {
					t.Errorf("docs/alerts.yml: %s has no label %q (it has %v)", name, m[1], known)
				}
				if m[1] == "state" && !ferry.State(m[2]).Valid() {
					t.Errorf("docs/alerts.yml: %s{state=%q} is not a state", name, m[2])
				}
			}
		}
	}
	if exprs == 0 {
		t.Fatal("docs/alerts.yml has no expr")
	}
}

// Every delivery outcome and reason docs/alerts.yml watches starts at zero
// for each configured source: increase() and rate() need a sample before a
// process's first 503 or rejection, or they miss it.
func TestAlertRulesSeeTheFirstDelivery(t *testing.T) {
	t.Parallel()
	reg := prom.NewRegistry()
	prometheus.NewMetrics(reg, []string{"stripe"})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	created := map[string]bool{} // "outcome/reason" of stripe's series
	for _, mf := range mfs {
		if mf.GetName() != "ferry_received_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["source"] == "stripe" {
				created[l["outcome"]+"/"+l["reason"]] = true
			}
		}
	}
	raw, err := os.ReadFile("../docs/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	received := regexp.MustCompile(`ferry_received_total\{[^}]*outcome="([a-z_]+)",reason=~?"([a-z_|]+)"`)
	watched := received.FindAllStringSubmatch(string(raw), -1)
	if len(watched) == 0 {
		t.Fatal(`docs/alerts.yml watches no ferry_received_total{outcome="...",reason="..."}`)
	}
	for _, w := range watched {
		for _, reason := range strings.Split(w[2], "|") {
			if !created[w[1]+"/"+reason] {
				t.Errorf(`docs/alerts.yml watches ferry_received_total{outcome=%q,reason=%q}, which NewMetrics does not start at zero`, w[1], reason)
			}
		}
	}
}

// The rules' unit tests (testdata/alerts_test.yml) pass: each alert fires on
// its case and not on the case it once paged on by mistake. They need
// Prometheus's promtool (Debian: apt-get install prometheus; .ci/run
// installs it); without it the test skips, saying so, and fails under
// CI=true.
func TestAlertRulesUnit(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		const msg = "promtool is not installed (Debian: apt-get install prometheus): testdata/alerts_test.yml did not run"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	out, err := exec.CommandContext(t.Context(), promtool, "test", "rules", "testdata/alerts_test.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
